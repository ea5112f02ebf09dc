"""Which checkpoint a path names, and the base model it was trained from.

Shared by export, infer and the standalone evaluation (and the commands above them), so that none of
those imports another just for these two checks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from xtts_ft.base_model import BaseModelFiles, resolve_base_model
from xtts_ft.checkpoint_store import CheckpointRecord, CheckpointStore
from xtts_ft.config import BaseModelConfig
from xtts_ft.errors import CheckpointError
from xtts_ft.layout import META_FILE


def refuse_folder_of_checkpoints(ckpt_dir: Path) -> None:
    """``--checkpoint RUN/checkpoints`` (or the run folder): name the step folders it holds, the newest as the example."""
    ckpt_dir = Path(ckpt_dir)
    if CheckpointStore.is_checkpoint(ckpt_dir) or CheckpointStore.holds_weights(ckpt_dir):
        return
    for store in (CheckpointStore(ckpt_dir), CheckpointStore.of_run(ckpt_dir)):
        steps = list(store.step_folders().values())
        if steps:
            shown = ", ".join(p.name for p in steps[-5:])
            more = f"{len(steps) - 5} more, " if len(steps) > 5 else ""
            raise CheckpointError(f"--checkpoint {ckpt_dir}: holds checkpoints, it is not one ({more}{shown}); pass "
                                  f"one of them, e.g. --checkpoint {steps[-1]}")


def base_for_checkpoint(ckpt_dir: Path, source: Optional[str] = None) -> BaseModelFiles:
    """The base model a checkpoint was trained from (its record), unless ``source`` names another."""
    if not Path(ckpt_dir).is_dir():
        raise CheckpointError(f"--checkpoint {ckpt_dir}: folder not found")
    refuse_folder_of_checkpoints(ckpt_dir)
    if source is None:
        record = CheckpointRecord.find(Path(ckpt_dir))
        if record is None:
            raise CheckpointError(f"{ckpt_dir}: no {META_FILE}; pass --base-model with the base model folder or "
                                  f"repo id")
        source = record.base_model
        if not source:
            raise CheckpointError(f"{ckpt_dir}: its checkpoint record does not name its base model; pass --base-model")
    return resolve_base_model(BaseModelConfig(source=str(source)))
