"""Which checkpoint a run continues from, and whether it may.

``checkpoint.resume``:

- ``auto``: the newest checkpoint in ``<run_dir>/checkpoints`` that verifies (a damaged one is
  skipped with a warning); none -> a new run;
- ``never``: a new run (the run folder must not hold another run's checkpoints: see run_folder.py);
- a path: that checkpoint folder; any problem with it is an error, never a silent fallback.

A checkpoint trained with a different vocabulary (other fingerprint) or a different GPT shape is
refused: its token ids or tensors do not fit this model. A changed LR, schedule or ``max_steps``
is allowed: the new value is used and the change is logged.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch
import torch.nn as nn
import yaml

from xtts_ft.checkpoint_store import CheckpointStore, Owner
from xtts_ft.config import Config, TrainingConfig
from xtts_ft.errors import CheckpointError
from xtts_ft.layout import META_FILE, CheckpointLayout
from xtts_ft.train.precision import PrecisionPolicy, fallback_policy
from xtts_ft.train.progress import Progress
from xtts_ft.train.stability import StabilityGuard, gpt_state_dict
from xtts_ft.training_state import RngState, SamplerKey, TrainingState

log = logging.getLogger(__name__)

_FIX = ("start a new run dir (run.output_dir), or set checkpoint.resume: never and add --archive-old-run (the old "
        "checkpoints are moved into old_runs/, not deleted)")
_LOGGED_CHANGES = ("lr", "max_steps", "lr_schedule", "warmup_steps", "min_lr_ratio", "step_every", "step_gamma",
                   "grad_accum_steps", "batch_size", "grad_clip", "new_token_lr_multiplier", "weight_decay")


def choose_checkpoint(resume: str, run_dir: Path, owner: Optional[Owner] = None) -> Optional[Path]:
    """The checkpoint folder to continue from, or None for a new run (``owner``: the current run's, run_folder.py)."""
    if resume == "never":
        return None
    if resume == "auto":
        store = CheckpointStore.of_run(run_dir, owner)
        path = store.latest()
        if path is None and store.list():
            log.warning("no checkpoint in %s verifies; starting a new run", store.root)
        return path
    path = Path(resume)
    if not CheckpointStore.is_checkpoint(path):
        raise CheckpointError(f"checkpoint.resume: '{path}' is not a checkpoint folder (it has no {META_FILE}); "
                              f"use auto, never, or a folder like {run_dir}/checkpoints/step_001000")
    return path


def tokenizer_setting_changes(ckpt_dir: Path, cfg: Config) -> list[str]:
    """``section.key: old -> new`` for each text/tokenizer setting that differs from the checkpoint's config.yaml.

    These settings decide the vocabulary, so they are the usual reason a resume is refused (for example
    ``text.fold_homophones``, whose default became true). An unreadable config.yaml gives no hints.
    """
    try:
        saved = yaml.safe_load(CheckpointLayout(ckpt_dir).config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return []
    if not isinstance(saved, dict):
        return []
    changes = []
    for section in ("text", "tokenizer"):
        found = saved.get(section)
        old = found if isinstance(found, dict) else {}
        for key, new in dataclasses.asdict(getattr(cfg, section)).items():
            if key in old and old[key] != new:
                changes.append(f"{section}.{key}: {json.dumps(old[key], ensure_ascii=False)} -> "
                               f"{json.dumps(new, ensure_ascii=False)}")
    return changes


def check_vocab(theirs: Optional[str], ckpt_dir: Path, vocab_fingerprint: str, cfg: Optional[Config] = None) -> None:
    """Refuse a checkpoint trained with another vocabulary (``theirs``: its recorded fingerprint).

    With ``cfg``, the message names the text/tokenizer settings that changed since the checkpoint.
    """
    if theirs != vocab_fingerprint:
        changes = tokenizer_setting_changes(ckpt_dir, cfg) if cfg is not None else []
        why = (f"settings changed since it was trained: {', '.join(changes)} (set them back in your config to "
               f"continue this run) - or " if changes else "")
        raise CheckpointError(
            f"{ckpt_dir}: trained with vocabulary {theirs}, but the current vocab.json has fingerprint "
            f"{vocab_fingerprint}; token ids differ so these weights cannot continue: {why}{_FIX}"
        )


def check_compatible(
    state: TrainingState, ckpt_dir: Path, *, vocab_fingerprint: str, gpt: nn.Module, cfg: Optional[Config] = None
) -> None:
    """Refuse a checkpoint of another vocabulary or model shape."""
    check_vocab(state.vocab_fingerprint, ckpt_dir, vocab_fingerprint, cfg)
    ours = gpt_state_dict(gpt)
    saved = state.gpt
    for key in sorted(set(ours) | set(saved)):
        if key not in saved or key not in ours:
            where = "the current model" if key not in ours else "the checkpoint"
            raise CheckpointError(
                f"{ckpt_dir}: GPT tensor '{key}' is missing from {where} (another model config); {_FIX}"
            )
        if tuple(saved[key].shape) != tuple(ours[key].shape):
            raise CheckpointError(
                f"{ckpt_dir}: GPT tensor '{key}' has shape {tuple(saved[key].shape)} in the checkpoint but "
                f"{tuple(ours[key].shape)} in the current model (another base model?); {_FIX}"
            )


def log_config_changes(state: TrainingState, current: TrainingConfig) -> list[str]:
    """Log (and return) training settings that differ from the checkpoint's; the current ones win."""
    saved = state.training_config or {}
    changes = []
    for key in _LOGGED_CHANGES:
        if key in saved and saved[key] != getattr(current, key):
            changes.append(f"training.{key}: {saved[key]} -> {getattr(current, key)}")
    for change in changes:
        log.info("resume: %s (the checkpoint's value is replaced by the config's)", change)
    return changes


@dataclass(frozen=True)
class ResumePoint:
    """What the loop continues from, besides the weights, optimizer and guard state loaded in place."""

    progress: Progress  # step, data position, LR factor, eval results and best score of the checkpoint
    policy: PrecisionPolicy
    rng: Optional[RngState]  # this rank's RNG states, None when they cannot be matched

    @property
    def step(self) -> int:
        return self.progress.step

    @property
    def position(self) -> tuple[int, int]:
        return self.progress.data_position


def apply_checkpoint(
    state: TrainingState, path: Path, *, gpt: nn.Module, optimizer: torch.optim.Optimizer, guard: StabilityGuard,
    tcfg: TrainingConfig, policy: PrecisionPolicy, device: torch.device, rank: int, world_size: int,
    sampler_key: SamplerKey, best_metric: str = "eval_loss",
) -> ResumePoint:
    """Load a verified checkpoint into the fresh GPT/optimizer/guard; return where training continues.

    ``sampler_key`` (world_size, batch_size, num_clips, seed) must match the saved one for the data
    order to continue exactly; otherwise it restarts at the next epoch (logged).
    """
    gpt.load_state_dict(state.gpt, strict=False)  # keys and shapes were checked by check_compatible
    if state.optimizer is not None:
        optimizer.load_state_dict(state.optimizer)
    else:  # checkpoint.optimizer_state: latest keeps the moments only in the newest checkpoint
        log.warning("resume: %s keeps weights only; AdamW's moments start afresh (the newest checkpoint has them)",
                    path)
    for group in optimizer.param_groups:  # the config's hyper-parameters win over the saved ones
        group["betas"] = tuple(tcfg.betas)
        group["weight_decay"] = tcfg.weight_decay if group.get("name") == "decay" else 0.0
    guard.load_state_dict(state.stability)
    saved = state.precision
    if policy.name == "fp16" and saved != "fp16" and saved == fallback_policy(policy, device).name:
        log.warning("resume: this run switched from fp16 to %s after its loss scale collapsed; it stays on %s",
                    saved, saved)
        policy = PrecisionPolicy(saved, device.type)
    log_config_changes(state, tcfg)
    rngs = state.rng or []
    rng = rngs[rank] if len(rngs) == world_size else None
    s = state.sampler
    same = all(s.get(k) == v for k, v in sampler_key.items())
    if rng is None or not same:
        log.warning("resume: world size, batch size, seed or training set changed since %s; the data order restarts "
                    "at the next epoch and random streams are reseeded (not bit-exact)", path)
    log.info("resuming from %s at step %d", path, state.step)
    progress = Progress.from_checkpoint(state, metric=best_metric,
                                        position=(s["epoch"], s["batch_index"]) if same else (s["epoch"] + 1, 0))
    return ResumePoint(progress=progress, policy=policy, rng=rng)
