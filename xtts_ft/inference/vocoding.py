"""HiFiGAN over an evaluation's samples as fast as the CPU allows, every sample computed the same way each time.

Where the evaluation's time goes (the demo's evaluation under cProfile on the shared 2-core CPU: 8 samples
and 2 MCD clips of 92-100 codes, 29.4 s): HiFiGAN 20.2 s (its convolutions run near the cores' peak: they
cannot be made cheaper without changing what is computed), the batched GPT decode 2.8 s, speaker
embeddings (conditioning and similarity) 2.5 s, librosa's first import 2.6 s (once per process), MCD 0.8 s,
the recogniser 0.15 s. What made the vocoder slower than it needs to be is how it ran:

- **one sample at a time on all intra-op threads**: torch splits every convolution over its threads and
  waits for the slowest at each of HiFiGAN's ~100 layers. On a machine whose other programs keep a core
  busy, a thread that shares that core holds the rest back (2 threads took 10-13 s per sample where 1
  thread took 4-8 s, 2-core machine at load 8); even when idle, the splits and waits cost (2 threads 4.95 s
  for 4 samples against 4.27 s for two samples at once on 1 thread each). On a CPU,
  :func:`vocode_all` now runs as many samples at once as the trainer has threads, each on one intra-op
  thread (the GIL is released inside each convolution). A sample is then always computed on one thread,
  whatever the load and the worker count: its audio is bit-identical run to run, and differs from the
  trainer-thread vocoding before by float rounding only (~2e-7). The GPT decode keeps the trainer's
  threads, so codes never change. A GPU vocodes one sample after another, as before.
- **weight norm recomputed at every call**: XTTS's HiFiGAN keeps coqui's ``weight_norm`` parametrisations
  (``Xtts`` never removes them), so each of its ~60 convolutions recomputes its weight from ``g`` and ``v``
  at every call. Inside :func:`vocode_all` each is computed once (``torch.nn.utils.parametrize.cached``):
  the same weights, bit for bit.

``benchmarks/eval_speed.py`` runs the old and the new vocoding on the same samples side by side.
"""

from __future__ import annotations

import contextlib
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Iterator, Sequence

import numpy as np
import numpy.typing as npt
import torch
from torch.nn.utils import parametrize

VocodeJob = tuple[list[torch.Tensor], torch.Tensor]  # (a sample's GPT latents, each (D,); its speaker embedding)


def vocode(hifigan: torch.nn.Module, latents: list[torch.Tensor], speaker_embedding: torch.Tensor) -> npt.NDArray[np.float32]:
    """One sample's audio (float32, mono) from its GPT latents, as ``Xtts.inference`` vocodes it."""
    with torch.no_grad():  # grad mode is per thread: set here, in whichever thread vocodes
        audio = hifigan(torch.stack(latents)[None], g=speaker_embedding)
    return audio.detach().cpu().numpy().astype(np.float32).reshape(-1)


def _timed(hifigan: torch.nn.Module, job: VocodeJob) -> tuple[npt.NDArray[np.float32], float]:
    start = time.perf_counter()
    audio = vocode(hifigan, *job)
    return audio, time.perf_counter() - start


@contextlib.contextmanager
def _intra_op_threads(threads: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def vocode_all(hifigan: torch.nn.Module, jobs: Sequence[VocodeJob],
               workers: int | None = None) -> list[tuple[npt.NDArray[np.float32], float]]:
    """Each job's ``(audio, seconds spent vocoding it)``, in order.

    On a CPU ``workers`` samples (default: torch's thread count, i.e. the trainer's) are vocoded at once, each
    on one intra-op thread; the thread count is put back afterwards. On a GPU one after another. A job that
    raises (the training run's stop request, checked inside every module) cancels those not started yet.
    """
    device = next(hifigan.parameters()).device
    count = max(1, min(len(jobs), workers or torch.get_num_threads()))
    with parametrize.cached():
        if device.type != "cpu" or count == 1 and torch.get_num_threads() == 1:
            return [_timed(hifigan, job) for job in jobs]
        with _intra_op_threads(1):
            if count == 1:
                return [_timed(hifigan, job) for job in jobs]
            pool = ThreadPoolExecutor(max_workers=count, thread_name_prefix="xtts-ft-vocode")
            futures: list[Future[tuple[npt.NDArray[np.float32], float]]] = [pool.submit(_timed, hifigan, job) for job in jobs]
            try:
                return [f.result() for f in futures]
            finally:
                pool.shutdown(wait=True, cancel_futures=True)
