"""Run one synthesis in its own thread and hand its chunks to asyncio code, with cancellation that always lands.

Awaiting each ``next(chunks)`` in a thread pool does not work for cancellation: anyio's worker
threads shield the awaiting task, so a client that hangs up is noticed only after the piece in
progress finishes (seconds with a full model) and the engine never learns it was abandoned. Here
one thread drives the engine's generator to its end and posts chunks to an ``asyncio.Queue``;
the consumer sets the cancel event when it stops listening, the engine sees it at its next model
layer (or before its next piece), counts the cancellation and ends, and the thread exits.
"""

from __future__ import annotations

import asyncio
import threading
from typing import AsyncIterator, Iterator

import numpy as np

_END = object()


class ChunkPump:
    def __init__(self, chunks: Iterator[np.ndarray], cancel: threading.Event) -> None:
        self.cancel = cancel
        self._chunks = chunks
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue = asyncio.Queue()
        self._thread = threading.Thread(target=self._run, name="xtts-ft-synthesis", daemon=True)
        self._thread.start()

    def _post(self, item) -> None:
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

    async def __aiter__(self) -> AsyncIterator[np.ndarray]:
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
