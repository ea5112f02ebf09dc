"""Will the run's files fit on the disk? Estimated before the first step, refused in one line if not.

A full-size checkpoint holds the GPT's weights (1.8 GB in fp32) and AdamW's two moments
(twice that): 5.3 GB each (measured), and ``keep_last`` + best + the one being written can sit on the disk
at once. A run that finds out at its first save, hours in, has wasted those hours; so the trainer
adds up what the run will write and compares it with the free space of the run directory (or
``checkpoint.disk_budget_gb``), naming the settings that lower it.
"""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch.nn as nn

from xtts_ft.audio_io import OUTPUT_RATE
from xtts_ft.checkpoint_store import CheckpointStore, RetentionPolicy
from xtts_ft.config import Config
from xtts_ft.errors import DiskSpaceError
from xtts_ft.layout import RunLayout
from xtts_ft.train.data import Limits

GB = 1e9
CODE_BYTES = 8  # the code cache keeps one int64 per code
SAMPLE_BYTES = 2  # 16-bit PCM: the prepared clips, and the evaluation samples


@dataclass(frozen=True)
class DiskEstimate:
    full_checkpoint: int  # bytes of one checkpoint with optimizer state
    weights_checkpoint: int  # bytes of one checkpoint without it
    checkpoints: int  # bytes of every checkpoint on disk at the worst moment
    samples: int
    export: int
    caches: int
    full_count: int = 0  # checkpoints with optimizer state on disk at the worst moment
    weights_count: int = 0  # weights-only checkpoints on disk then
    existing: int = 0  # bytes of checkpoints already in the run (replaced, so counted as freed)

    @property
    def total(self) -> int:
        return self.checkpoints + self.samples + self.export + self.caches

    def caches_only(self) -> DiskEstimate:
        """What a machine with a run folder of its own adds there (rank 0's folder gets checkpoints and samples)."""
        return DiskEstimate(self.full_checkpoint, self.weights_checkpoint, 0, 0, 0, self.caches)


def _tensor_bytes(module: nn.Module) -> tuple[int, int]:
    """(bytes of every parameter and buffer, bytes of the trainable parameters)."""
    weights = sum(t.numel() * t.element_size() for t in list(module.parameters()) + list(module.buffers()))
    trainable = sum(p.numel() * p.element_size() for p in module.parameters() if p.requires_grad)
    return weights, trainable


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0


def estimate_run_disk(cfg: Config, gpt: nn.Module, limits: Limits, *, run_dir: Path,
                      base_model_pth: Optional[Path] = None, evaluations: Optional[int] = None) -> DiskEstimate:
    """Bytes the run will add to ``run_dir`` at its fullest (checkpoints it replaces are counted as freed);
    ``limits``: the model's (``model_limits``): how long a sample can be, how many samples one code stands for."""
    ck, ev = cfg.checkpoint, cfg.evaluation
    weights, trainable = _tensor_bytes(gpt)
    full = weights + 2 * trainable  # AdamW: exp_avg and exp_avg_sq, same size as the parameters
    counts = RetentionPolicy.from_config(ck).peak_on_disk()  # (with optimizer state, weights only) at the fullest
    files = RunLayout(run_dir)
    existing = CheckpointStore.of_run(run_dir).disk_bytes()
    checkpoints = counts[0] * full + counts[1] * weights - existing
    if evaluations is None:
        every = ev.every_steps or cfg.training.max_steps
        evaluations = cfg.training.max_steps // every + 2  # at the start and at the end too
    # every sample at the longest the model can say
    per_eval = (len(ev.sentences) * ev.max_speakers + ev.mcd_clips) * limits.longest_audio_s * OUTPUT_RATE * SAMPLE_BYTES
    samples = evaluations * per_eval - folder_bytes(files.samples)
    export = base_model_pth.stat().st_size if base_model_pth and base_model_pth.is_file() else weights
    # one dataset: data/wavs; a dataset list: data/datasets/<i>_<name>/wavs (xtts_ft.data.multi)
    wavs = sum(folder_bytes(p) for p in [files.data / "wavs", *files.listed_datasets.glob("*/wavs")])
    caches = int(wavs * CODE_BYTES / (SAMPLE_BYTES * limits.code_stride)) - folder_bytes(files.cache)
    return DiskEstimate(full, weights, max(0, checkpoints), max(0, int(samples)), export, max(0, caches), *counts,
                        existing)


def _sizes(values: list[int], total: int) -> tuple[list[float], str]:
    """``values`` in one unit (GB, or MB for small runs), rounded so that the shown parts are what is added."""
    unit, scale, digits = ("GB", GB, 2) if total >= GB else ("MB", 1e6, 1)
    return [round(v / scale, digits) for v in values], unit


def _explain(estimate: DiskEstimate) -> tuple[str, float, str]:
    """The parts of the estimate as an addition whose shown numbers add up; (text, shown total, unit)."""
    e = estimate
    (full, weights, existing, export, samples, caches), unit = _sizes(
        [e.full_checkpoint, e.weights_checkpoint, e.existing, e.export, e.samples, e.caches], e.total)
    checkpoints = max(0.0, round(e.full_count * full + e.weights_count * weights - existing, 2))
    kinds = [f"{e.full_count} x {full:g} {unit} with optimizer state"]
    if e.weights_count:
        kinds.append(f"{e.weights_count} x {weights:g} {unit} weights only")
    already = f" - {existing:g} {unit} already written" if existing else ""
    total = round(checkpoints + export + samples + caches, 2)
    text = (f"checkpoints {checkpoints:g} {unit} ({' + '.join(kinds)}{already}) + export {export:g} {unit} + samples "
            f"{samples:g} {unit} + caches {caches:g} {unit} = {total:g} {unit}")
    return text, total, unit


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
    parts, total, unit = _explain(estimate)
    (have,), _ = _sizes([free_bytes], estimate.total)
    if ck.disk_budget_gb is not None:
        limit = f"the budget checkpoint.disk_budget_gb is {ck.disk_budget_gb:g} GB"
        way = f"raise checkpoint.disk_budget_gb to at least {math.ceil(estimate.total / GB * 100) / 100:g}"
    else:
        limit = f"{have:g} {unit} is free there"
        way = "free space on that disk"
    lower.append(way)
    raise DiskSpaceError(
        f"{run_dir}: the run needs about {total:g} {unit} of disk but {limit}: {parts}; lower it with "
        f"{', '.join(lower[:-1])}, or {lower[-1]}" if len(lower) > 1 else
        f"{run_dir}: the run needs about {total:g} {unit} of disk but {limit}: {parts}; {lower[-1]}"
    )
