"""Will a stop's checkpoint be written before the process is killed?

On SIGTERM the trainer finishes the current step and saves (``signals.py``). ``torchrun`` gives its
workers 30 s for that, then sends SIGKILL (``torch.distributed.elastic.multiprocessing.api``,
``_close(timeout=30)``; Kubernetes' default grace period is 30 s too). A full XTTS-v2 training
checkpoint is about 5.5 GB (GPT weights plus AdamW's two fp32 copies, fsynced), which a slow
network disk does not write in that time. The save is atomic, so a kill mid-save leaves the previous
checkpoint intact, but the steps since it are lost, up to ``checkpoint.every_steps`` of them.

:class:`SaveTimeCheck` tells the user before that happens: at setup it estimates the save time from
the checkpoint's size and a short fsynced write into the run dir, and after every save it compares
the measured time (plus one step, which a stop finishes first) with the 30 s. Each warning is given
once per run.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Optional, Sequence

import torch

from xtts_ft.tempfiles import temp_sibling

log = logging.getLogger(__name__)

KILL_AFTER_S = 30.0  # torchrun: SIGTERM, then SIGKILL 30 s later
PROBE_BYTES = 64 * 2**20
PROBE_ABOVE_BYTES = 512 * 2**20  # smaller checkpoints need a disk slower than ~17 MB/s to miss 30 s


def checkpoint_bytes(params: Sequence[torch.Tensor]) -> int:
    """Size of a training checkpoint: the GPT's tensors plus AdamW's two fp32 copies of the trainable ones."""
    weights = sum(p.numel() * p.element_size() for p in params)
    return int(weights + sum(2 * p.numel() * 4 for p in params if p.requires_grad))


def measure_write_rate(folder: Path, nbytes: int = PROBE_BYTES) -> float:
    """Bytes per second of an fsynced write of ``nbytes`` into ``folder`` (the file is removed)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = temp_sibling(folder / ".write_rate_probe")
    block = os.urandom(4 * 2**20)
    start = time.perf_counter()
    try:
        with open(path, "wb") as f:
            for _ in range(max(1, nbytes // len(block))):
                f.write(block)
            f.flush()
            os.fsync(f.fileno())
        return max(1, nbytes // len(block)) * len(block) / max(time.perf_counter() - start, 1e-6)
    finally:
        path.unlink(missing_ok=True)


class SaveTimeCheck:
    """Warn (once) when a stop's save is expected to take longer than the time before SIGKILL."""

    def __init__(self, every_steps: int, limit_s: float = KILL_AFTER_S) -> None:
        self.every_steps, self.limit_s = int(every_steps), float(limit_s)
        self.warned = False
        self.estimate_s: Optional[float] = None

    def _advice(self) -> str:
        return (f"torchrun sends SIGKILL {self.limit_s:g} s after SIGTERM, so a stop would likely be killed while saving: "
                f"the previous checkpoint stays intact, but up to checkpoint.every_steps ({self.every_steps}) steps "
                f"are lost. Lower checkpoint.every_steps to lose less, or put run.output_dir on a faster local disk")

    def _warn(self, what: str) -> None:
        if not self.warned:
            self.warned = True
            log.warning("%s; %s", what, self._advice())

    def estimate(self, nbytes: int, run_dir: Path) -> Optional[float]:
        """Estimated seconds to write ``nbytes`` into ``run_dir`` (None: too small to matter, not probed)."""
        if nbytes < PROBE_ABOVE_BYTES:
            return None
        rate = measure_write_rate(Path(run_dir))
        self.estimate_s = nbytes / rate
        log.info("checkpoints: about %.1f GB each; this disk writes %.0f MB/s (fsynced): about %.0f s per save",
                 nbytes / 1e9, rate / 1e6, self.estimate_s)
        if self.estimate_s > self.limit_s:
            self._warn(f"a checkpoint (about {nbytes / 1e9:.1f} GB) is expected to take {self.estimate_s:.0f} s to write "
                       f"here")
        return self.estimate_s

    def after_save(self, seconds: float, step_seconds: float) -> None:
        """A save took ``seconds``; a stop would first finish a step of ``step_seconds``."""
        if seconds + step_seconds > self.limit_s:
            self._warn(f"the last checkpoint took {seconds:.0f} s to write (plus {step_seconds:.0f} s for the step a "
                       f"stop finishes first)")
