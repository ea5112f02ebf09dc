"""``checkpoint.optimizer_state: latest``: older checkpoints keep the GPT weights, not AdamW's moments.

AdamW's two moments take twice the GPT's size (3.5 GB of a 5.3 GB full-size checkpoint), and
only a resume needs them; export, evaluation and synthesis read the weights. After each save the
previous checkpoints (the best one included) are rewritten without the optimizer state through
:func:`xtts_ft.train.checkpoint.save_checkpoint`, so the slim copy is written, verified (sha256 in
its meta.json) and swapped in atomically like any other save. Resume uses the latest checkpoint,
which always keeps its full state; resuming from a slim one by name restarts the moments (logged).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

from xtts_ft.errors import CheckpointError
from xtts_ft.layout import CheckpointLayout
from xtts_ft.train import checkpoint as ckpt

log = logging.getLogger(__name__)

SLIM_KEY = "optimizer_state"  # meta.json: false for a weights-only checkpoint
_RECOMPUTED = ("format", "step", "training_state_sha256", "created")


def is_slim(ckpt_dir: Path) -> bool:
    return ckpt.read_meta(ckpt_dir).get(SLIM_KEY) is False


def strip_optimizer_state(ckpt_dir: Path) -> None:
    """Rewrite ``ckpt_dir`` without its optimizer state (atomically; the sha256 is recomputed)."""
    ckpt_dir = Path(ckpt_dir)
    state = ckpt.load_training_state(ckpt_dir).without_optimizer()
    meta = {k: v for k, v in ckpt.verify_checkpoint(ckpt_dir).items() if k not in _RECOMPUTED}
    config = CheckpointLayout(ckpt_dir).config.read_bytes()
    vocab = CheckpointLayout(ckpt_dir).vocab
    # the vocab is read before the old folder is swapped out (save_checkpoint copies it into the new one)
    ckpt.save_checkpoint(ckpt_dir.parent.parent, state, {**meta, SLIM_KEY: False},
                         vocab_path=vocab, write_config=lambda p: p.write_bytes(config))


def slim_older_checkpoints(run_dir: Path, latest: Path, owner: Optional[ckpt.Owner] = None) -> list[Path]:
    """Strip the optimizer state from every checkpoint of the current run (``owner``) but ``latest``;
    returns the ones rewritten. Another run's checkpoints are never touched."""
    done = []
    for _, path in ckpt.owned_checkpoints(run_dir, owner):
        if path.resolve() == Path(latest).resolve():
            continue
        try:
            if is_slim(path):
                continue
            strip_optimizer_state(path)
        except (CheckpointError, OSError) as exc:  # housekeeping: the full checkpoint stays as it was
            log.warning("could not drop the optimizer state of %s (%s); it keeps it", path, exc)
            continue
        done.append(path)
    return done
