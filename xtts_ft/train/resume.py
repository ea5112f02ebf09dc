"""Which checkpoint a run continues from, and whether it may.

``checkpoint.resume``:

- ``auto``: the newest checkpoint in ``<run_dir>/checkpoints`` that verifies (a damaged one is
  skipped with a warning); none -> a new run;
- ``never``: a new run (existing checkpoints are kept until retention replaces them);
- a path: that checkpoint folder; any problem with it is an error, never a silent fallback.

A checkpoint trained with a different vocabulary (other fingerprint) or a different GPT shape is
refused: its token ids or tensors do not fit this model. A changed LR, schedule or ``max_steps``
is allowed: the new value is used and the change is logged.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

import torch.nn as nn

from xtts_ft.config import TrainingConfig
from xtts_ft.errors import CheckpointError
from xtts_ft.train.checkpoint import META_FILE, find_latest_checkpoint, list_checkpoints
from xtts_ft.train.stability import gpt_state_dict

log = logging.getLogger(__name__)

_FIX = "start a new run dir (run.output_dir) or set checkpoint.resume: never"
_LOGGED_CHANGES = ("lr", "max_steps", "lr_schedule", "warmup_steps", "min_lr_ratio", "step_every", "step_gamma",
                   "grad_accum_steps", "batch_size", "grad_clip", "new_token_lr_multiplier", "weight_decay")


def choose_checkpoint(resume: str, run_dir: Path) -> Optional[Path]:
    """The checkpoint folder to continue from, or None for a new run."""
    if resume == "never":
        existing = list_checkpoints(run_dir)
        if existing:
            log.warning("checkpoint.resume: never - starting a new run; the %d checkpoints in %s will be replaced as "
                        "new ones are saved", len(existing), run_dir / "checkpoints")
        return None
    if resume == "auto":
        path = find_latest_checkpoint(run_dir)
        if path is None and list_checkpoints(run_dir):
            log.warning("no checkpoint in %s verifies; starting a new run", run_dir / "checkpoints")
        return path
    path = Path(resume)
    if not (path / META_FILE).is_file():
        raise CheckpointError(f"checkpoint.resume: '{path}' is not a checkpoint folder (it has no {META_FILE}); "
                              f"use auto, never, or a folder like {run_dir}/checkpoints/step_001000")
    return path


def check_compatible(state: dict, ckpt_dir: Path, *, vocab_fingerprint: str, gpt: nn.Module) -> None:
    """Refuse a checkpoint of another vocabulary or model shape."""
    theirs = state.get("vocab_fingerprint")
    if theirs != vocab_fingerprint:
        raise CheckpointError(
            f"{ckpt_dir}: trained with vocabulary {theirs}, but the current vocab.json has fingerprint {vocab_fingerprint}; "
            f"token ids differ so these weights cannot continue: {_FIX}"
        )
    ours = gpt_state_dict(gpt)
    saved = state["gpt"]
    for key in sorted(set(ours) | set(saved)):
        if key not in saved or key not in ours:
            where = "the current model" if key not in ours else "the checkpoint"
            raise CheckpointError(f"{ckpt_dir}: GPT tensor '{key}' is missing from {where} (another model config); {_FIX}")
        if tuple(saved[key].shape) != tuple(ours[key].shape):
            raise CheckpointError(
                f"{ckpt_dir}: GPT tensor '{key}' has shape {tuple(saved[key].shape)} in the checkpoint but "
                f"{tuple(ours[key].shape)} in the current model (another base model?); {_FIX}"
            )


def log_config_changes(state: dict, current: TrainingConfig) -> list[str]:
    """Log (and return) training settings that differ from the checkpoint's; the current ones win."""
    saved = state.get("training_config") or {}
    changes = []
    for key in _LOGGED_CHANGES:
        if key in saved and saved[key] != getattr(current, key):
            changes.append(f"training.{key}: {saved[key]} -> {getattr(current, key)}")
    for change in changes:
        log.info("resume: %s (the checkpoint's value is replaced by the config's)", change)
    return changes
