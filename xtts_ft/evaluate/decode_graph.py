"""The decode step replayed from a CUDA graph: one launch for the 30 layers instead of about fifteen per layer.

A decode step of XTTS's GPT for a handful of rows is little arithmetic: on a GPU its time is mostly the
host launching kernels one after another (about 15 per layer, 30 layers), each a few microseconds of
Python and driver work. A CUDA graph records those launches once and replays them with one call. It
needs every shape and every address to stay the same between replays, which the window step
(:meth:`.decode_cache.SlotCache.window_step`) does not give: its row count and its attended window
change at every step. :meth:`.decode_cache.SlotCache.every_row_step` computes the same numbers for the
batch's rows over every buffer row and column (masked), with the written column given as a tensor; its
shapes change only when the cache lays its buffers out again (a new row count or width: at most once per
128 steps while rows are decoding), and then the graph is recorded again. A decoder with graphs keeps its
cache's buffers when the batch empties (``SlotCache(keep_when_empty=True)``), so requests that come one
at a time replay one recording.

Each recording is checked before it is used: the step that records it is also run as the window step,
and the graph's replay of the same step must give the same hidden states (within ``tolerance``: the
masked extra columns and another attention kernel change float rounding). If recording fails or the
replay differs, the decoder goes on without graphs and says why once (``disabled``); the window step's
result is what that step returns either way.

On the CPU there is nothing to gain (no launches to save) and the engine's exactness guarantees are
tested there, so graphs are for CUDA only (``ServeConfig.decode_graphs``). The recording itself is a
function handed in (:func:`cuda_graph`), so the CPU tests run everything else with a recorder that
simply calls the step.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Callable, ContextManager, Optional

import torch

from xtts_ft.evaluate.decode_cache import SlotCache

log = logging.getLogger(__name__)

Replay = Callable[[], torch.Tensor]  # runs the recorded step again; its output tensor (the same one each time)
Recorder = Callable[[Callable[[], torch.Tensor]], Replay]


def cuda_graph(step: Callable[[], torch.Tensor]) -> Replay:
    """Record ``step`` as a CUDA graph (after one warm-up run on the recording stream, as torch's docs ask, so lazy
    initialisations happen outside the recording) and return its replay. ``step`` must be safe to run twice:
    the decode step writes the same column with the same values again.

    ``capture_begin``/``capture_end`` rather than the ``torch.cuda.graph`` context: that context also runs the
    garbage collector and empties the allocator's cache at every recording (tens of milliseconds with coqui
    and transformers loaded), which a request's first step would wait for. ``thread_local``: the speech
    engine's other threads keep using the GPU (HiFiGAN) while this one records."""
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with _no_autocast_cache(), torch.cuda.stream(side):
        step()
        graph.capture_begin(capture_error_mode="thread_local")
        try:
            out = step()
        finally:
            graph.capture_end()
    torch.cuda.current_stream().wait_stream(side)

    def replay() -> torch.Tensor:
        graph.replay()
        return out

    return replay


def _no_autocast_cache() -> ContextManager[object]:
    """Autocast as it is, without its cache of cast weights: a cached cast made outside the recording would be
    baked into the graph by address (torch's CUDA-graph notes ask for ``cache_enabled=False``)."""
    if not torch.is_autocast_enabled("cuda"):
        return contextlib.nullcontext()
    uncached: ContextManager[object] = torch.autocast("cuda", dtype=torch.get_autocast_dtype("cuda"), cache_enabled=False)
    return uncached


def call_directly(step: Callable[[], torch.Tensor]) -> Replay:
    """A recorder that records nothing: the step runs at every replay (the CPU tests' stand-in for
    :func:`cuda_graph`: every shape, address and check the same, no GPU)."""
    return step


class FixedShapeStep:
    """Runs a :class:`SlotCache`'s steps through a recorded fixed-shape step; one recording per buffer layout."""

    def __init__(self, record: Recorder = cuda_graph, tolerance: Optional[float] = None) -> None:
        self.record = record
        self.tolerance = tolerance  # largest |replay - window step| / max |window step| accepted; None: by dtype
        self.disabled: Optional[str] = None  # why the steps went back to the window step, once they did
        self.recordings = 0
        self.replays = 0
        self._key: Optional[tuple] = None
        self._replay: Optional[Replay] = None
        self._inputs: Optional[torch.Tensor] = None  # (buffer rows, 1, dim): the recorded step's input
        self._column: Optional[torch.Tensor] = None  # (1,) long: the column the recorded step writes

    def run(self, cache: SlotCache, embeddings: torch.Tensor) -> torch.Tensor:
        """``cache``'s step (called by :meth:`SlotCache.step`, which has made room and marked the column)."""
        if self.disabled is not None:
            return cache.window_step(embeddings)
        assert cache.mask is not None
        key = (cache.layouts, tuple(cache.mask.shape), embeddings.dtype, torch.is_autocast_enabled("cuda"),
               torch.get_autocast_dtype("cuda"))
        n = cache.rows
        if key == self._key and self._replay is not None and self._inputs is not None and self._column is not None:
            self._inputs[:n].copy_(embeddings)  # rows past n keep old inputs: finite, and nobody reads their output
            self._column.fill_(cache.end)
            self.replays += 1
            return self._replay()[:n].clone()  # the next replay overwrites the graph's output
        return self._record(cache, embeddings, key)

    def _record(self, cache: SlotCache, embeddings: torch.Tensor, key: tuple) -> torch.Tensor:
        """A new layout: the window step gives this step's result; the new recording must give the same."""
        self._replay = None
        expected = cache.window_step(embeddings)
        assert cache.mask is not None
        n, rows = cache.rows, cache.mask.shape[0]
        self._inputs = torch.zeros(rows, 1, embeddings.shape[-1], dtype=embeddings.dtype, device=embeddings.device)
        self._inputs[:n] = embeddings
        self._column = torch.full((1,), cache.end, dtype=torch.long, device=embeddings.device)
        inputs, column = self._inputs, self._column
        try:
            replay = self.record(lambda: cache.every_row_step(inputs, column))
            got = replay()[:n]
        except RuntimeError as exc:  # recording refused (an operation a graph cannot hold, out of memory)
            self._disable(f"recording the decode step failed: {exc}".splitlines()[0])
            return expected
        error = float((got.float() - expected.float()).abs().max()) / max(float(expected.float().abs().max()), 1e-6)
        if not error <= self._tolerance(expected.dtype):
            self._disable(f"the recorded decode step differs from the eager one by {error:.2e} (relative)")
            return expected
        self.recordings += 1
        self._key, self._replay = key, replay
        return expected

    def _tolerance(self, dtype: torch.dtype) -> float:
        if self.tolerance is not None:
            return self.tolerance
        # fp32: another attention kernel over more (masked) columns changes rounding, not more; half precision
        # (bf16 autocast: the hidden states come out in fp32 after the layer norm, the products in bf16) more.
        return 1e-3 if dtype == torch.float32 and not torch.is_autocast_enabled("cuda") else 5e-2

    def _disable(self, why: str) -> None:
        self.disabled = why
        self._key = self._replay = self._inputs = self._column = None
        log.warning("decode: CUDA graphs off for this decoder (%s); the eager step runs instead", why)
