"""HiFiGAN over an evaluation's samples as fast as the machine allows, computing the same audio.

Where the evaluation's time goes (the demo's evaluation under cProfile on the shared 2-core CPU: 8 samples
and 2 MCD clips of 92-100 codes, 29.4 s): HiFiGAN 20.2 s (its convolutions run near the cores' peak: they
cannot be made cheaper without changing what is computed), the batched GPT decode 2.8 s, speaker
embeddings (conditioning and similarity) 2.5 s, librosa's first import 2.6 s (once per process), MCD 0.8 s,
the recogniser 0.15 s. Two things made the
vocoder slower than it needs to be, and neither changes a sample:

- **threads on a shared CPU**: torch runs every convolution on all its intra-op threads and waits for the
  slowest. When other programs keep some cores busy, a thread that shares a core with them holds the rest
  back: HiFiGAN on 2 threads took 10-13 s where 1 thread took 4-8 s (2-core machine, load 8). The trainer
  chose its thread count from the load when it started; :func:`threads_for_idle_cores` re-decides for the
  vocoding (and for the scoring: speaker embeddings, the recogniser) from the cores idle *now* (a 0.2 s
  look at ``/proc/stat``), never above the trainer's count, and puts it back afterwards. The GPT decode
  keeps the trainer's threads, so a sample's codes never depend on how busy the machine was; HiFiGAN's
  output at another thread count differs by float rounding only.
- **weight norm recomputed at every call**: XTTS's HiFiGAN keeps coqui's ``weight_norm`` parametrisations
  (``Xtts`` never removes them), so each of its ~60 convolutions recomputes its weight from ``g`` and ``v``
  at every call (~7 % of the vocoder's time in the profile). Inside :func:`fast_vocoding` each is computed
  once per evaluation (``torch.nn.utils.parametrize.cached``): the same weights, bit for bit.

``benchmarks/eval_speed.py`` runs the old and the new vocoding on the same samples side by side.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path
from typing import Callable, Iterator, Optional

import numpy as np
import torch
from torch.nn.utils import parametrize

log = logging.getLogger(__name__)

PROC_STAT = Path("/proc/stat")
IDLE_WINDOW_S = 0.2  # how long the idle cores are watched before the vocoding starts

IdleCores = Callable[[], Optional[float]]  # cores idle right now (None: cannot tell)


def _cpu_times(stat_text: str, cpus: set[int]) -> dict[int, tuple[int, int]]:
    """(busy, total) jiffies per CPU in ``cpus`` from the text of /proc/stat."""
    out: dict[int, tuple[int, int]] = {}
    for line in stat_text.splitlines():
        name, *fields = line.split() or [""]
        if not name.startswith("cpu") or not name[3:].isdigit() or int(name[3:]) not in cpus:
            continue
        values = [int(v) for v in fields[:8]]  # user nice system idle iowait irq softirq steal
        idle = values[3] + values[4]
        out[int(name[3:])] = (sum(values) - idle, sum(values))
    return out


def _read_proc_stat() -> str:
    return PROC_STAT.read_text(encoding="ascii")


def idle_cores(window_s: float = IDLE_WINDOW_S, read_stat: Callable[[], str] = _read_proc_stat,
               cpus: Optional[set[int]] = None) -> Optional[float]:
    """How many of this process's cores sat idle over the next ``window_s`` seconds (None: cannot tell).

    This process sleeps meanwhile, so what keeps the cores busy is the rest of the machine (data-loader
    workers included: they compete for the same cores).
    """
    try:
        cpus = cpus if cpus is not None else os.sched_getaffinity(0)
        before = _cpu_times(read_stat(), cpus)
        time.sleep(window_s)
        after = _cpu_times(read_stat(), cpus)
    except (AttributeError, OSError, ValueError, IndexError):  # not Linux, or a /proc/stat it cannot read
        return None
    spans = [(after[c][0] - before[c][0], after[c][1] - before[c][1]) for c in after if c in before]
    spans = [(busy, total) for busy, total in spans if total > 0]
    if not spans:
        return None
    return sum(1.0 - busy / total for busy, total in spans)


def choose_threads(current: int, idle: Optional[float]) -> int:
    """The vocoder's thread count: the idle cores (at least 1), never more than the trainer's ``current``."""
    if idle is None:
        return current
    return max(1, min(current, int(idle + 0.5)))


@contextlib.contextmanager
def threads_for_idle_cores(device: torch.device, measure: IdleCores = idle_cores) -> Iterator[int]:
    """Inside: torch's intra-op threads suit the cores idle now (CPU only); after: as before. Yields the count."""
    current = torch.get_num_threads()
    if device.type != "cpu":
        yield current
        return
    idle = measure()
    threads = choose_threads(current, idle)
    if threads != current:
        log.info("evaluation: vocoding on %d torch thread(s) instead of %d (%.1f of %d cores idle)", threads, current,
                 idle or 0.0, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count())
        torch.set_num_threads(threads)
    try:
        yield threads
    finally:
        if torch.get_num_threads() != current:
            torch.set_num_threads(current)


@contextlib.contextmanager
def fast_vocoding(device: torch.device, measure: IdleCores = idle_cores) -> Iterator[int]:
    """Threads for the cores idle now and each weight-normed weight computed once: the audio is unchanged."""
    with threads_for_idle_cores(device, measure) as threads, parametrize.cached():
        yield threads


def vocode(hifigan: torch.nn.Module, latents: list[torch.Tensor], speaker_embedding: torch.Tensor) -> np.ndarray:
    """One sample's audio (float32, mono) from its GPT latents, as ``Xtts.inference`` vocodes it."""
    with torch.no_grad():
        audio = hifigan(torch.stack(latents)[None], g=speaker_embedding)
    return audio.detach().cpu().numpy().astype(np.float32).reshape(-1)
