"""HiFiGAN calls one at a time, the most urgent first.

The engine's callers vocode their own chunks in their own threads, one call at a time (callers running
HiFiGAN side by side only fight over the same cores: measured, eight at once gave 0.4x the throughput).
With a plain lock, who goes next is whoever the operating system wakes: a caller still waiting for its
first audio can wait behind several chunks of callers whose listeners have seconds of audio buffered.

Here each call says when its audio is needed: the moment its listener's audio runs out (request start +
seconds already sent; a first chunk's moment has passed already). Waiting calls go in that order
(earliest deadline first); calls with the same deadline go in arrival order. Nothing is preempted: a
call that has its turn runs to its end.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from contextlib import contextmanager
from typing import Iterator


class VocoderTurns:
    """``with turns.turn(deadline):`` runs one vocoder call when no other runs and no earlier deadline waits."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._busy = False
        self._waiting: list[tuple[float, int]] = []  # heap of (deadline, arrival)
        self._arrivals = itertools.count()
        self.order: list[float] = []  # deadlines in the order their calls ran (the last 64; tests read it)

    @contextmanager
    def turn(self, deadline: float) -> Iterator[None]:
        """Wait for this call's turn (``deadline``: time.perf_counter() seconds when its audio is needed)."""
        entry = (float(deadline), next(self._arrivals))
        with self._cond:
            heapq.heappush(self._waiting, entry)
            try:
                while self._busy or self._waiting[0] != entry:
                    self._cond.wait()
            except BaseException:  # interrupted while waiting: leave the queue, or the calls behind wait forever
                self._waiting.remove(entry)
                heapq.heapify(self._waiting)
                self._cond.notify_all()
                raise
            heapq.heappop(self._waiting)
            self._busy = True
            self.order = (self.order + [entry[0]])[-64:]
        try:
            yield
        finally:
            with self._cond:
                self._busy = False
                self._cond.notify_all()

    @property
    def waiting(self) -> int:
        """Calls waiting for their turn now."""
        with self._cond:
            return len(self._waiting)
