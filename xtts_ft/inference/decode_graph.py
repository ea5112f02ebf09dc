"""The decode step replayed from CUDA graphs: one launch for the 30 layers instead of about fifteen per layer.

A decode step of XTTS's GPT for a handful of rows is little arithmetic: on a GPU its time is mostly the
host launching kernels one after another (about 15 per layer, 30 layers), each a few microseconds of
Python and driver work. A CUDA graph records those launches once and replays them with one call. It
needs every shape and every address to stay the same between replays, which the window step
(:meth:`.decode_cache.SlotCache.window_step`) does not give: its row count and its attended window
change at every step. :meth:`.decode_cache.SlotCache.every_row_step` computes the same numbers for the
batch's rows over a fixed number of buffer rows and columns (masked), with the written column given as a
tensor.

The first recordings were made on :class:`.decode_cache.SlotCache`, whose buffers are allocated again
whenever the batch outgrows them or a longer prefix joins: on an H200 a single caller's request met three
layouts (three recordings of about three eager steps each), which cost more than the replays saved. So a
decoder with graphs uses :class:`StaticSlotCache`: its buffers are allocated once, at the most rows the
decoder will hold and the most positions the GPT accepts, and never again; its window moves inside them in
place; and a step computes only the first rows and columns that the batch needs, rounded up to a power of
two (rows) and to ``COLUMN_BUCKET`` (columns). Each such (rows, columns) bucket is recorded once, the first
time a step needs it, and replayed for every later request: a few dozen recordings at most for the life of
a server.

Each recording is checked before it is used: the step that records it is also run as the window step,
and the graph's replay of the same step must give the same hidden states (within ``tolerance``: the
masked extra columns and another attention kernel change float rounding), with TF32 off for the products
while it is made and checked (:func:`full_fp32_matmuls`: the verdict does not depend on what a training run in
the same process set). If recording fails or the replay differs, the decoder goes on without graphs and says why
once (``disabled``); the window step's result is what that step returns either way. Every recording is captured on
one stream per device (:func:`capture_stream`), which the engine's vocoder stream never is (:func:`side_stream`).

On the CPU there is nothing to gain (no launches to save) and the engine's exactness guarantees are
tested there, so graphs are for CUDA only (``ServeConfig.decode_graphs``). The recording itself is a
function handed in (:func:`cuda_graph`), so the CPU tests run everything else with a recorder that
simply calls the step.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Callable, ContextManager, Generic, Iterator, Optional, Protocol, TypeVar

import torch
import torch.nn as nn

from xtts_ft.inference.decode_cache import SlotCache, window_columns

log = logging.getLogger(__name__)

Out = TypeVar("Out")  # what a recorded step gives: the decode step a tensor, the prefill a tuple of them
Key = TypeVar("Key")  # what tells a subclass's recordings apart (a fixed shape, dtypes, autocast)
Recorded = TypeVar("Recorded")  # what a subclass keeps per key: the replay and the buffers it reads
#: The decode step's key: (buffer layout, fixed shape, input dtype, autocast on, autocast dtype).
StepKey = tuple[int, tuple[int, int], torch.dtype, bool, torch.dtype]


class Recorder(Protocol):
    """Records a step and returns its replay, which runs it again and gives its output (the same tensors each time)."""

    def __call__(self, step: Callable[[], Out], /) -> Callable[[], Out]: ...


COLUMN_BUCKET = 256  # a step computes the buffer's first columns in multiples of this (fewer, larger buckets)


class StaticSlotCache(SlotCache):
    """A :class:`SlotCache` whose buffers are allocated once, for ``rows`` rows (rounded up to a power of two) and
    every position the GPT accepts (its ``n_positions``, rounded up to ``column_bucket``), and never again: a
    recorded step keeps the addresses it was recorded with. The window moves inside the buffers in place (a copy
    of the window) when the next column would not exist, when a longer prefix joins, or when a move to the left
    lets the steps compute fewer column buckets.

    When that one allocation does not fit on the device, the cache says so once and is laid out as needed
    instead, as :class:`SlotCache` does (``static`` False): the graphs still work, recorded again at each layout."""

    keep_when_empty = True

    def __init__(self, transformer: nn.Module, rows: int, column_bucket: int = COLUMN_BUCKET) -> None:
        super().__init__(transformer)
        self.bucket = int(column_bucket)
        self.capacity_rows = 1 << max(int(rows) - 1, 0).bit_length()
        positions = int(transformer.config.n_positions) + 1  # + the column the step writes
        self.capacity_columns = -(-positions // self.bucket) * self.bucket
        self.moves = 0  # times the window was moved inside the buffers
        self.static = True  # False once the one allocation did not fit: laid out as needed from then on

    def _fit(self, prefix: int, like: torch.Tensor) -> None:
        if self.mask is None and self.static:
            try:
                self._relayout(self.capacity_rows, self.capacity_columns, 0, like)  # the one allocation
            except torch.OutOfMemoryError:
                self._as_needed(like)
        if not self.static:
            super()._fit(prefix, like)
            return
        need_rows = self.rows + (1 if prefix else 0)
        if need_rows > self.capacity_rows:
            raise ValueError(f"the decode cache holds {self.capacity_rows} rows; a row more was asked for")
        self._longest = max(self._longest, prefix)
        before = max(self.end - self.start, prefix)  # columns that must exist left of ``end``
        home = max(before, self._longest)  # the leftmost end that holds the window and any prefix seen so far
        if home >= self.capacity_columns:
            raise ValueError(f"a row of {home + 1} positions does not fit the decode cache's "
                             f"{self.capacity_columns} columns (the GPT's n_positions)")
        if before <= self.end < self.capacity_columns and self._columns_for(self.end) <= self._columns_for(home):
            return
        self._move(home)

    def _as_needed(self, like: torch.Tensor) -> None:
        """The buffers at their largest did not fit: forget the partial allocation, lay out as needed from now on."""
        config = self.transformer.config
        size = (2 * len(self.transformer.h) * self.capacity_rows * self.capacity_columns * config.n_embd
                * (self.keys[0] if self.keys else like).element_size())
        self.keys, self.values, self.mask = [], [], None
        self.start = self.end = 0
        self.static = False
        log.warning("decode cache: %d rows x %d positions (%.1f GB) do not fit on %s; laid out as needed instead (the "
                    "decode step is recorded again at each new layout; a lower --max-active-streams keeps it static)",
                    self.capacity_rows, self.capacity_columns, size / 1e9, like.device)

    def _columns_for(self, end: int) -> int:
        """The columns a step writing column ``end`` computes: ``end + 1`` rounded up to the bucket."""
        return min(-(-(end + 1) // self.bucket) * self.bucket, self.capacity_columns)

    def _move(self, new_end: int) -> None:
        """The window to end at ``new_end``, copied in place (the buffers and their addresses stay)."""
        assert self.mask is not None
        n, width = self.rows, self.end - self.start
        new_start = new_end - width
        if n and new_start != self.start:
            self.moves += 1
            for buf in (*self.keys, *self.values):
                window = window_columns(buf, self.start, self.end)[:n].clone()  # the two ranges may overlap
                window_columns(buf, new_start, new_end)[:n] = window
            marks = self.mask[:n, self.start:self.end].clone()
            self.mask[:n] = False
            self.mask[:n, new_start:new_end] = marks
        self.first = [f - self.start + new_start for f in self.first]
        self.start, self.end = new_start, new_end

    def fixed_shape(self) -> tuple[int, int]:
        """The batch's rows rounded up to a power of two; the columns up to the written one, rounded up to the bucket."""
        if not self.static:
            return super().fixed_shape()
        rows = min(1 << max(self.rows - 1, 0).bit_length(), self.capacity_rows)
        return rows, self._columns_for(self.end)


# The stream every recording is captured on, per device: made once (see capture_stream), and one recording at a time
_capture_streams: dict[int, torch.cuda.Stream] = {}
_making_streams = threading.Lock()
_capturing = threading.Lock()


def _device_index(device: Optional[torch.device | str | int]) -> int:
    index = device if isinstance(device, int) else (None if device is None else torch.device(device).index)
    return torch.cuda.current_device() if index is None else index


def capture_stream(device: Optional[torch.device | str | int] = None) -> torch.cuda.Stream:
    """The one stream every recording on ``device`` (default: the current one) is captured on, made at its first use.

    A stream made with ``torch.cuda.Stream()`` comes from a pool of 32 per device and priority, handed out in turn
    (c10's CUDAStream pool): a new stream per recording was, every 32nd time, the speech engine's vocoder stream, and
    a recording captured on it while a reader vocoded there (HiFiGAN's kernels in a decode graph, or a capture broken
    by a reader's copy and the graphs turned off for good). So the recordings share one stream, and the engine's
    other streams come from :func:`side_stream`, which never hands out this one."""
    index = _device_index(device)
    with _making_streams:
        if index not in _capture_streams:
            _capture_streams[index] = torch.cuda.Stream(index)
        return _capture_streams[index]


def side_stream(device: Optional[torch.device | str | int] = None) -> torch.cuda.Stream:
    """A new stream on ``device`` for work beside the decode loop (the engine's vocoder), never :func:`capture_stream`:
    the pool hands the capture stream out again every 32nd time, and the next one in turn is another."""
    capture = capture_stream(device)
    stream = torch.cuda.Stream(_device_index(device))
    if stream == capture:
        stream = torch.cuda.Stream(_device_index(device))
    if stream == capture:  # c10's pool holds 32 streams: two in a row are never the same one
        raise RuntimeError("the CUDA stream pool gave the capture stream twice in a row")
    return stream


def cuda_graph(step: Callable[[], Out], pool: Optional[tuple[int, int]] = None) -> Callable[[], Out]:
    """Record ``step`` as a CUDA graph (after one warm-up run on the recording stream, as torch's docs ask, so lazy
    initialisations happen outside the recording) and return its replay. ``step`` must be safe to run twice:
    the decode step writes the same column with the same values again.

    ``capture_begin``/``capture_end`` rather than the ``torch.cuda.graph`` context: that context also runs the
    garbage collector and empties the allocator's cache at every recording (tens of milliseconds with coqui
    and transformers loaded), which a request's first step would wait for. ``thread_local``: the speech
    engine's other threads keep using the GPU (HiFiGAN) while this one records. The recording stream is
    :func:`capture_stream`, one recording at a time (two decode loops in one process share it; everything sent to
    a stream while it captures lands in the graph). ``pool``: a memory pool shared with other recordings
    (``torch.cuda.graph_pool_handle()``); None: the graph's own."""
    graph = torch.cuda.CUDAGraph()
    side = capture_stream()
    with _capturing:
        side.wait_stream(torch.cuda.current_stream())
        with _no_autocast_cache(), torch.cuda.stream(side):
            step()
            graph.capture_begin(pool=pool, capture_error_mode="thread_local")
            try:
                out = step()
            finally:
                graph.capture_end()
        torch.cuda.current_stream().wait_stream(side)

    def replay() -> Out:
        graph.replay()
        return out

    return replay


@contextlib.contextmanager
def full_fp32_matmuls() -> Iterator[None]:
    """TF32 off for fp32 matrix products while a recording is made and checked against the eager computation.

    A training run in the same process may have turned TF32 on (``precision.tf32``, the GPU smoke test's section 2);
    then the eager step and the recorded one, over different shapes, can pick different kernels with a 10-bit
    mantissa each, differ by more than the fp32 tolerance, and the graphs would be turned off for good. With the
    setting pinned, the check gives the same verdict whatever TF32 says, and the graphs always compute full fp32 (a
    recording keeps the kernels it was made with). Only the matmul setting: the decode's products; convolutions
    (HiFiGAN, on the readers' threads meanwhile) keep theirs. Nothing is written when TF32 is off already (serve's
    case: torch's default)."""
    flags = torch.backends.cuda.matmul
    if not flags.allow_tf32:
        yield
        return
    flags.allow_tf32 = False
    try:
        yield
    finally:
        flags.allow_tf32 = True


def _no_autocast_cache() -> ContextManager[object]:
    """Autocast as it is, without its cache of cast weights: a cached cast made outside the recording would be
    baked into the graph by address (torch's CUDA-graph notes ask for ``cache_enabled=False``)."""
    if not torch.is_autocast_enabled("cuda"):
        return contextlib.nullcontext()
    uncached: ContextManager[object] = torch.autocast("cuda", dtype=torch.get_autocast_dtype("cuda"), cache_enabled=False)
    return uncached


def relative_difference(got: torch.Tensor, expected: torch.Tensor) -> float:
    """The largest |got - expected| relative to the largest |expected| (NaN where either holds one): what a
    recording's replay is held to against the eager computation."""
    return float((got.float() - expected.float()).abs().max()) / max(float(expected.float().abs().max()), 1e-6)


def call_directly(step: Callable[[], Out]) -> Callable[[], Out]:
    """A recorder that records nothing: the step runs at every replay (the CPU tests' stand-in for
    :func:`cuda_graph`: every shape, address and check the same, no GPU)."""
    return step


class Recordings(Generic[Key, Recorded]):
    """What the recorded decode step and the recorded prefill (:mod:`.prefill_graph`) share: their counts, the
    tolerance a recording's replay is held to against the eager computation, and turning off, once, with the
    reason."""

    what = "decode"  # the log line's subject
    instead = "the eager step"  # what runs once the recordings are off
    _log = log  # where that line goes (each module's own logger)

    def __init__(self, tolerance: Optional[float] = None) -> None:
        self.tolerance = tolerance  # largest |replay - eager| / max |eager| accepted; None: by dtype
        self.disabled: Optional[str] = None  # why the eager computation runs again, once it does
        self.recordings = 0
        self.replays = 0
        self._recorded: dict[Key, Recorded] = {}  # per fixed shape: the replay and the buffers it reads

    def _tolerance(self, dtype: torch.dtype) -> float:
        if self.tolerance is not None:
            return self.tolerance
        # fp32: another kernel over another shape (more masked columns, padded positions) changes rounding, not
        # more; half precision (bf16 weights, or autocast: products in bf16, layer norms in fp32) more.
        return 1e-3 if dtype == torch.float32 and not torch.is_autocast_enabled("cuda") else 5e-2

    def _disable(self, why: str) -> None:
        self.disabled = why
        self._recorded = {}
        self._log.warning("%s: CUDA graphs off for this decoder (%s); %s runs instead", self.what, why, self.instead)


class FixedShapeStep(Recordings[StepKey, tuple[Callable[[], torch.Tensor], torch.Tensor, torch.Tensor]]):
    """Runs a :class:`SlotCache`'s steps through recorded fixed-shape steps: one recording per fixed shape
    (:meth:`SlotCache.fixed_shape`) of each buffer layout, replayed whenever a step has that shape again."""

    def __init__(self, record: Recorder = cuda_graph, tolerance: Optional[float] = None, fused_gelu: bool = False) -> None:
        """``fused_gelu``: the recorded steps run the blocks' GELU as one kernel (:func:`.decode_cache.mlp`; the
        eager step they are checked against keeps Hugging Face's): what serve records on a card."""
        super().__init__(tolerance)
        self.record = record
        self.fused_gelu = fused_gelu
        # per key: the replay, the recorded step's input (fixed rows, 1, dim), the column it writes ((1,) long)
        self._recorded: dict[StepKey, tuple[Callable[[], torch.Tensor], torch.Tensor, torch.Tensor]] = {}

    def run(self, cache: SlotCache, embeddings: torch.Tensor) -> torch.Tensor:
        """``cache``'s step (called by :meth:`SlotCache.step`, which has made room and marked the column)."""
        if self.disabled is not None:
            return cache.window_step(embeddings)
        key = (cache.layouts, cache.fixed_shape(), embeddings.dtype, torch.is_autocast_enabled("cuda"),
               torch.get_autocast_dtype("cuda"))
        n = cache.rows
        recorded = self._recorded.get(key)
        if recorded is None:
            with full_fp32_matmuls():  # the eager step, the recording and their comparison: whatever TF32 says
                return self._record(cache, embeddings, key)
        replay, inputs, column = recorded
        inputs[:n].copy_(embeddings)  # rows past n keep old inputs: finite, and nobody reads their output
        column.fill_(cache.end)
        self.replays += 1
        return replay()[:n].clone()  # the next replay overwrites the graph's output

    def _record(self, cache: SlotCache, embeddings: torch.Tensor, key: StepKey) -> torch.Tensor:
        """A new fixed shape: the window step gives this step's result; the new recording must give the same."""
        # recordings of an earlier layout hold buffers that are gone: they can never replay again
        self._recorded = {k: v for k, v in self._recorded.items() if k[0] == cache.layouts}
        expected = cache.window_step(embeddings)
        n, rows = cache.rows, cache.fixed_shape()[0]
        inputs = torch.zeros(rows, 1, embeddings.shape[-1], dtype=embeddings.dtype, device=embeddings.device)
        inputs[:n] = embeddings
        column = torch.full((1,), cache.end, dtype=torch.long, device=embeddings.device)
        try:
            replay = self.record(lambda: cache.every_row_step(inputs, column, self.fused_gelu))
            got = replay()[:n]
        except RuntimeError as exc:  # recording refused (an operation a graph cannot hold, out of memory)
            self._disable(f"recording the decode step failed: {exc}".splitlines()[0])
            return expected
        error = relative_difference(got, expected)
        if not error <= self._tolerance(expected.dtype):
            self._disable(f"the recorded decode step differs from the eager one by {error:.2e} (relative)")
            return expected
        self.recordings += 1
        self._recorded[key] = (replay, inputs, column)
        return expected

