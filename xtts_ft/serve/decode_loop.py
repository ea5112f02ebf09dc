"""One thread decodes the GPT for every active request at once (continuous batching).

Requests are :class:`Stream` objects: :meth:`DecodeLoop.submit` queues one; at its next turn the loop
prefills it, in one forward pass with every other request that arrived meanwhile, and it joins the batch
(:class:`xtts_ft.inference.batch_decode.BatchDecoder`); every step appends one code and its latent to each
row and wakes the row's reader; a row that reaches its stop code
or its code limit, or whose reader cancelled, leaves. At most ``max_active`` rows decode at once (memory:
each holds a KV cache); more wait in the loop's queue, in order. The HTTP server's admission limit
(``ServeConfig.queue_size``, 503 beyond) sits in front of both.

No lock is held across a piece: the loop holds its condition only to take new requests, and a
reader only to look at its own stream's counters. Vocoding happens in the reader's thread
(:mod:`xtts_ft.inference.streaming_vocoder`), while the loop goes on decoding.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from concurrent.futures import Future
from typing import Callable, Optional, TypeVar

import torch

from xtts_ft.inference.batch_decode import BatchDecoder, DecodeRequest
from xtts_ft.inference.decode_graph import FixedShapeStep
from xtts_ft.inference.decoder_settings import DecoderSettings

log = logging.getLogger(__name__)
T = TypeVar("T")


class Stream:
    """One request in the loop; its reader waits for codes with :meth:`wait` and may :meth:`cancel` it."""

    def __init__(self, request: DecodeRequest) -> None:
        self.request = request
        self._cond = threading.Condition()
        self.produced = 0  # codes (and latents) in request.codes/request.latents so far
        self.code_times: list[float] = []  # when the loop handed each code on (time.perf_counter)
        self.finished = False
        self.cancelled = False
        self.error: Optional[BaseException] = None
        # The reader waits for more than this many codes (-1: nobody waits). The loop wakes it only then, or at the
        # end: a reader woken at every step (40 per chunk) took the GIL from the decode thread 32 times a step at 32
        # callers, to find it had nothing to do.
        self._wants = -1
        self.wakeups = 0  # times the reader's wait was ended by the loop (not by its timeout)

    def wait(self, have: int, timeout: float) -> int:
        """Block until more than ``have`` codes exist, the stream ended, or ``timeout`` s passed; the count now."""
        with self._cond:
            if self.produced <= have and not self.finished:
                self._wants = have
                if self._cond.wait(timeout):
                    self.wakeups += 1
                self._wants = -1
            if self.error is not None:
                raise self.error
            return self.produced

    def progress(self) -> tuple[int, bool]:
        """The codes there are and whether the stream has ended, read together (an end seen with a count taken
        before it would call a partial count the whole piece)."""
        with self._cond:
            return self.produced, self.finished

    def cancel(self) -> None:
        """The reader no longer wants codes: the loop drops the row at its next step."""
        self.cancelled = True

    def _update(self, finished: bool = False, error: Optional[BaseException] = None) -> None:
        now = time.perf_counter()
        with self._cond:
            self.produced = len(self.request.codes)
            self.code_times.extend([now] * (self.produced - len(self.code_times)))
            self.finished = self.finished or finished
            self.error = self.error or error
            if self.produced > self._wants or self.finished or self.error is not None:
                self._cond.notify_all()


class DecodeLoop:
    """The decoding thread of one model (started at the first request)."""

    stream_type = Stream  # what :meth:`submit` hands back (benchmarks/reader_wakeups.py subclasses it)

    def __init__(self, gpt: torch.nn.Module, max_active: int, settings: Optional[DecoderSettings] = None) -> None:
        """``settings``: how its decoders run (:func:`xtts_ft.inference.decoder_settings.decoder_settings`: the
        engine's from the device and ``ServeConfig``); None: coqui's way, eager and one step at a time."""
        self.gpt = gpt
        self.max_active = max(1, int(max_active))
        self.settings = settings or DecoderSettings()
        self.transformer = self.settings.transformer(gpt)  # the GPT-2 blocks in the decode dtype, made once
        self._decoder = self._new_decoder()
        self._active: list[Stream] = []
        self._pending: deque[Stream] = deque()
        # run in the thread (call): each call's run (its result handed to its caller) and fail (an exception instead)
        self._calls: deque[tuple[Callable[[BatchDecoder], None], Callable[[BaseException], None]]] = deque()
        self._cond = threading.Condition()
        self._thread: Optional[threading.Thread] = None
        self._closed = False
        self.steps = 0  # batched decode steps run
        self.largest_batch = 0  # most rows decoded together in one step
        self.dropped = 0  # rows that left because their reader cancelled
        self.largest_join = 0  # most requests prefilled together in one forward pass

    def _new_decoder(self) -> BatchDecoder:
        return self.settings.decoder(self.gpt, self.max_active, self.transformer)

    def submit(self, request: DecodeRequest) -> Stream:
        stream = self.stream_type(request)
        with self._cond:
            if self._closed:
                raise RuntimeError("the decode loop is closed")
            self._pending.append(stream)
            self._start()
            self._cond.notify()
        return stream

    def call(self, fn: Callable[[BatchDecoder], T], timeout: float = 600.0) -> T:
        """``fn(decoder)`` run in the loop's thread between two steps (the decoder is not thread-safe), its result
        (or its exception raised here). The serve warm-up records prefill graphs this way."""
        future: Future[T] = Future()

        def run(decoder: BatchDecoder) -> None:
            future.set_result(fn(decoder))

        with self._cond:
            if self._closed:
                raise RuntimeError("the decode loop is closed")
            self._calls.append((run, future.set_exception))
            self._start()
            self._cond.notify()
        return future.result(timeout)

    def _start(self) -> None:
        """Start the thread if it is not running (holding the condition)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="xtts-ft-decode", daemon=True)
            self._thread.start()

    @property
    def fixed_step(self) -> Optional[FixedShapeStep]:
        """The CUDA-graph step of the current decoder (its recordings, replays, and why it turned off), if any."""
        return self._decoder.parts.step

    @property
    def graph_recordings(self) -> int:
        """CUDA graphs the current decoder has recorded (its steps', their heads' and its prefills')."""
        graphed = (self._decoder.parts.step, self._decoder.parts.head, self._decoder.parts.prefill)
        return sum(g.recordings for g in graphed if g is not None)

    def describe_graphs(self) -> Optional[str]:
        """The current decoder's CUDA graphs in a line (recordings and replays, or why they turned off); None: none."""
        parts = []
        for name, graphed in (("step", self._decoder.parts.step), ("head", self._decoder.parts.head),
                              ("prefill", self._decoder.parts.prefill)):
            if graphed is not None:
                parts.append(f"{name} off: {graphed.disabled}" if graphed.disabled else
                             f"{name} {graphed.recordings} recordings, {graphed.replays} replays")
        return "; ".join(parts) or None

    @property
    def active(self) -> int:
        """Rows decoding now."""
        return len(self._active)

    def close(self) -> None:
        """Stop the thread after its current step; waiting and active streams end with an error."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout=30)

    # --- the thread --------------------------------------------------------------------------
    def _run(self) -> None:
        with torch.inference_mode():
            while True:
                with self._cond:
                    while not self._pending and not self._active and not self._calls and not self._closed:
                        self._cond.wait()
                    if self._closed:
                        self._fail_all(RuntimeError("the decode loop was closed"))
                        return
                    joining = [self._pending.popleft()
                               for _ in range(min(len(self._pending), self.max_active - len(self._active)))]
                    calls = [self._calls.popleft() for _ in range(len(self._calls))]
                for run, fail in calls:
                    try:
                        run(self._decoder)
                    except Exception as exc:  # noqa: BLE001 - the caller's failure, raised in the caller's thread
                        fail(exc)
                self._join(joining)
                self._leave([s for s in self._active if s.cancelled], cancelled=True)
                if not self._active:
                    continue
                self.largest_batch = max(self.largest_batch, len(self._active))
                try:
                    self._decoder.step()
                except Exception as exc:  # noqa: BLE001 - handed to every reader, which re-raises it
                    log.exception("decode step failed")
                    self._fail_all(exc, pending=False)
                    continue
                self.steps += 1
                for stream in self._active:
                    stream._update(finished=stream.request.done)
                self._active = [s for s in self._active if not s.request.done]

    def _join(self, streams: list[Stream]) -> None:
        """Prefill the new streams together; when that fails (e.g. out of memory), each alone, so a failure is
        only its own request's."""
        for stream in [s for s in streams if s.cancelled]:
            self.dropped += 1
            stream._update(finished=True)
        streams = [s for s in streams if not s.cancelled]
        if not streams:
            return
        self._read_in_flight()
        failure: Optional[BaseException] = None
        self.largest_join = max(self.largest_join, len(streams))
        retry: list[Stream] = []
        try:
            self._decoder.join(*[s.request for s in streams])
        except Exception as exc:  # noqa: BLE001 - these requests' failure (e.g. out of memory), not the loop's
            failure = exc
            if len(streams) > 1:  # the ones whose prefill never ran to a first code are tried again, each alone
                retry = [s for s in streams if not s.request.codes]
                log.warning("prefill of %d requests together failed (%s); %d tried again one by one", len(streams),
                            exc, len(retry))
            else:
                log.exception("prefill failed")
        joined = {id(r) for r in self._decoder.rows}
        retried = {id(s) for s in retry}
        for stream in streams:
            if id(stream) in retried:
                continue
            if failure is not None and id(stream.request) not in joined and not stream.request.done:
                stream._update(finished=True, error=failure)  # its first code was chosen, then the join failed
                continue
            stream._update(finished=stream.request.done)
            if not stream.request.done:
                self._active.append(stream)
        for stream in retry:
            self._join([stream])

    def _read_in_flight(self) -> None:
        """(overlap) The step in flight read back before the batch changes; its codes handed to their readers."""
        self._decoder.flush()
        for stream in self._active:
            stream._update(finished=stream.request.done)
        self._active = [s for s in self._active if not s.request.done]

    def _leave(self, streams: list[Stream], *, cancelled: bool) -> None:
        if not streams:
            return
        self._decoder.drop([s.request for s in streams])
        gone = {id(s) for s in streams}
        self._active = [s for s in self._active if id(s) not in gone]
        self.dropped += len(streams) if cancelled else 0
        for stream in streams:
            stream._update(finished=True)

    def _fail_all(self, exc: BaseException, pending: bool = True) -> None:
        streams = list(self._active)
        if pending:  # (called holding the condition)
            streams += list(self._pending)
            self._pending.clear()
            for _run, fail in self._calls:
                fail(exc)
            self._calls.clear()
        self._active = []
        self._decoder = self._new_decoder()
        for stream in streams:
            stream._update(finished=True, error=exc)
