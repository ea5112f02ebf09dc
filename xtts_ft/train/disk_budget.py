"""Will the run's files fit on the disk? Estimated before the first step, refused in one line if not.

A full-size checkpoint holds the GPT's weights (1.8 GB in fp32) and AdamW's two moments
(twice that): 5.3 GB each (measured), and ``keep_last`` + best + the one being written can sit on the disk
at once. A run that finds out at its first save, hours in, has wasted those hours; so the trainer
adds up what the run will write and compares it with the free space of the run directory (or
``checkpoint.disk_budget_gb``), naming the settings that lower it.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch.nn as nn

from xtts_ft.config import Config
from xtts_ft.errors import DiskSpaceError
from xtts_ft.layout import RunLayout

GB = 1e9
_CODE_BYTES_PER_AUDIO_BYTE = 8 / (2 * 1024)  # int64 code per 1024 16-bit samples (code stride)
_SAMPLE_SECONDS = 28  # the longest sample the model can say (605 codes x 1024 / 22050 Hz)


@dataclass(frozen=True)
class DiskEstimate:
    full_checkpoint: int  # bytes of one checkpoint with optimizer state
    weights_checkpoint: int  # bytes of one checkpoint without it
    checkpoints: int  # bytes of every checkpoint on disk at the worst moment
    samples: int
    export: int
    caches: int

    @property
    def total(self) -> int:
        return self.checkpoints + self.samples + self.export + self.caches


def _tensor_bytes(module: nn.Module) -> tuple[int, int]:
    """(bytes of every parameter and buffer, bytes of the trainable parameters)."""
    weights = sum(t.numel() * t.element_size() for t in list(module.parameters()) + list(module.buffers()))
    trainable = sum(p.numel() * p.element_size() for p in module.parameters() if p.requires_grad)
    return weights, trainable


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0


def estimate_run_disk(cfg: Config, gpt: nn.Module, *, run_dir: Path, base_model_pth: Optional[Path] = None,
                      evaluations: Optional[int] = None) -> DiskEstimate:
    """Bytes the run will add to ``run_dir`` at its fullest (checkpoints it replaces are counted as freed)."""
    ck, ev = cfg.checkpoint, cfg.evaluation
    weights, trainable = _tensor_bytes(gpt)
    full = weights + 2 * trainable  # AdamW: exp_avg and exp_avg_sq, same size as the parameters
    best = 1 if ck.keep_best else 0
    if ck.optimizer_state == "latest":
        # the new latest (full) is written while the previous latest is still full; then the previous one is
        # rewritten weights-only (its new copy staged beside it)
        checkpoints = 2 * full + (ck.keep_last - 1 + best + 1) * weights
    else:
        checkpoints = (ck.keep_last + best + 1) * full  # the one being written before the oldest is pruned
    files = RunLayout(run_dir)
    checkpoints -= folder_bytes(files.checkpoints)
    if evaluations is None:
        every = ev.every_steps or cfg.training.max_steps
        evaluations = cfg.training.max_steps // every + 2  # at the start and at the end too
    per_eval = (len(ev.sentences) * ev.max_speakers + ev.mcd_clips) * _SAMPLE_SECONDS * 24000 * 2
    samples = evaluations * per_eval - folder_bytes(files.samples)
    export = base_model_pth.stat().st_size if base_model_pth and base_model_pth.is_file() else weights
    # one dataset: data/wavs; a dataset list: data/datasets/<i>_<name>/wavs (xtts_ft.data.multi)
    wavs = sum(folder_bytes(p) for p in [files.data / "wavs", *files.listed_datasets.glob("*/wavs")])
    caches = int(wavs * _CODE_BYTES_PER_AUDIO_BYTE) - folder_bytes(files.cache)
    return DiskEstimate(full, weights, max(0, checkpoints), max(0, samples), export, max(0, caches))


def check_disk_budget(cfg: Config, estimate: DiskEstimate, run_dir: Path, free_bytes: Optional[int] = None) -> None:
    """Raise one line when ``estimate`` exceeds the budget (``checkpoint.disk_budget_gb`` or the free space)."""
    if free_bytes is None:
        budget_gb = cfg.checkpoint.disk_budget_gb
        free_bytes = int(budget_gb * GB) if budget_gb is not None else shutil.disk_usage(run_dir).free
    if estimate.total <= free_bytes:
        return
    ck = cfg.checkpoint
    lower = []
    if ck.keep_last > 1:
        lower.append("checkpoint.keep_last: 1")
    if ck.keep_best:
        lower.append("checkpoint.keep_best: false")
    if ck.optimizer_state != "latest":
        lower.append("checkpoint.optimizer_state: latest (older checkpoints keep weights only)")
    lower.append("run.output_dir on a larger disk")
    where = "checkpoint.disk_budget_gb" if ck.disk_budget_gb is not None else "free"
    raise DiskSpaceError(
        f"{run_dir}: the run needs about {estimate.total / GB:.1f} GB of disk but {free_bytes / GB:.1f} GB is "
        f"{where} (checkpoints {estimate.checkpoints / GB:.1f} GB: {estimate.full_checkpoint / GB:.2f} GB each with "
        f"optimizer state, {estimate.weights_checkpoint / GB:.2f} GB weights only; export {estimate.export / GB:.1f} "
        f"GB; samples and caches {(estimate.samples + estimate.caches) / GB:.2f} GB); lower it with "
        f"{', '.join(lower)}"
    )
