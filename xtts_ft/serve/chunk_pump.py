"""Run one synthesis in its own thread and hand its chunks to asyncio code, with cancellation that always lands.

Awaiting each ``next(chunks)`` in a thread pool does not work for cancellation: anyio's worker
threads shield the awaiting task, so a client that hangs up is noticed only after the piece in
progress finishes (seconds with a full model) and the engine never learns it was abandoned. Here
one thread drives the engine's generator to its end and posts chunks to an ``asyncio.Queue``;
the consumer sets the cancel event when it stops listening, the engine sees it between steps of its own
(``SpeechEngine._codes``: before each chunk, and every 50 ms while it waits for codes or for a vocoder turn; a vocoder
call under way finishes first), takes the piece out of the decode batch, counts the cancellation and ends, and the
thread exits.

The consumer's end is not the synthesis's: the thread may still be inside a vocoder call when the consumer
stops listening. ``on_end`` is called when the thread has ended (the HTTP server gives a request's admission
back then, so work nobody listens to still counts against the limit until it has really stopped).

A server keeps its pumps in one :class:`Generations`: when it is told to stop (Ctrl-C, SIGTERM) it
cancels every generation under way at once, so the answers end within one vocoder call instead of
being cut off by uvicorn's shutdown timeout, and it waits for their threads before the process
exits (a thread left inside torch at interpreter exit aborts the process: "terminate called
without an active exception").
"""

from __future__ import annotations

import asyncio
import enum
import threading
import time
from typing import AsyncIterator, Callable, Iterator, Optional, TypeAlias, Union

import numpy as np
import numpy.typing as npt


class _End(enum.Enum):
    """The queue's last item: the synthesis thread has ended (a one-member enum, so the type checker narrows on it)."""

    END = "end"


_END = _End.END
#: What the synthesis thread hands the event loop: a chunk of audio, the exception that ended it, or the end.
_Item: TypeAlias = Union[npt.NDArray[np.float32], BaseException, _End]


class Generations:
    """The syntheses under way in one server: a stop cancels them all, and :meth:`join` waits for their threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: dict[threading.Thread, threading.Event] = {}
        self.stopping = threading.Event()

    def add(self, thread: threading.Thread, cancel: threading.Event) -> None:
        with self._lock:
            self._live[thread] = cancel
        if self.stopping.is_set():  # started while the server was stopping: nobody will receive it
            cancel.set()

    @property
    def live(self) -> int:
        """Synthesis threads under way now (a caller's answer may have ended before its thread: /health's queue)."""
        with self._lock:
            return len(self._live)

    def done(self, thread: threading.Thread) -> None:
        with self._lock:
            self._live.pop(thread, None)

    def stop(self) -> int:
        """Cancel every generation under way (and any started later); how many were cut short."""
        self.stopping.set()
        with self._lock:
            live = list(self._live.values())
        for cancel in live:
            cancel.set()
        return len(live)

    def join(self, timeout: float) -> bool:
        """Wait for every synthesis thread to end; False if one is still running after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                threads = list(self._live)
            if not threads:
                return True
            threads[0].join(max(0.0, deadline - time.monotonic()))
            if time.monotonic() >= deadline and threads[0].is_alive():
                return False


class ChunkPump:
    def __init__(self, chunks: Iterator[npt.NDArray[np.float32]], cancel: threading.Event,
                 generations: Optional[Generations] = None, on_end: Optional[Callable[[], None]] = None) -> None:
        """``on_end``: called once the synthesis thread has ended (or could not start), in that thread."""
        self.cancel = cancel
        self._chunks = chunks
        self._generations = generations
        self._on_end = on_end
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[_Item] = asyncio.Queue()
        self._thread = threading.Thread(target=self._run, name="xtts-ft-synthesis", daemon=True)
        if generations is not None:
            generations.add(self._thread, cancel)
        try:
            self._thread.start()
        except BaseException:  # (no thread: nothing else would call them)
            self._ended()
            raise

    def _ended(self) -> None:
        if self._generations is not None:
            self._generations.done(self._thread)
        if self._on_end is not None:
            self._on_end()

    def _post(self, item: _Item) -> None:
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # the event loop is gone (server shutting down): nobody is listening
            self.cancel.set()

    def _run(self) -> None:
        try:
            for chunk in self._chunks:
                self._post(chunk)
        except BaseException as exc:  # handed to the consumer, which re-raises it in the event loop
            self._post(exc)
        finally:
            self._post(_END)
            self._ended()

    async def __aiter__(self) -> AsyncIterator[npt.NDArray[np.float32]]:
        try:
            while True:
                item = await self._queue.get()
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            self.cancel.set()  # stopped listening (done, failed or cancelled): nothing more is wanted
