"""HiFiGAN calls one at a time, the most urgent first; on a GPU, the chunks waiting meanwhile in the same call.

The engine's callers vocode their own chunks in their own threads, one call at a time (callers running
HiFiGAN side by side only fight over the same cores: measured, eight at once gave 0.4x the throughput).
With a plain lock, who goes next is whoever the operating system wakes: a caller still waiting for its
first audio can wait behind several chunks of callers whose listeners have seconds of audio buffered.

Here each call says when its audio is needed: the moment its listener's audio runs out (request start +
seconds already sent; a first chunk's moment has passed already). Waiting calls go in that order
(earliest deadline first); calls with the same deadline go in arrival order. Nothing is preempted: a
call that has its turn runs to its end.

A streamed chunk (:meth:`VocoderTurns.vocode`) may also be taken along by the call whose turn it is: with
``max_batch`` above 1, the caller whose turn comes runs its own chunk and up to ``max_batch - 1`` other
waiting chunks that ``fits`` says can share its call (the earliest deadlines first), in one ``run``, and
hands each its result. On a GPU one HiFiGAN call for a short chunk is mostly kernel launches, so 32
callers' first chunks cost about one call instead of 32 in a row. On the CPU it is slower (two cores,
full-size HiFiGAN, 8 windows of 60 and 100 frames: 0.82x and 0.74x of one by one), so the engine keeps
``max_batch`` 1 there.

A caller that is no longer wanted (its listener hung up, the server stops) should not wait for its turn to find
out: ``abandon``, when given, is called every ``ABANDON_POLL_S`` while the call waits, and whatever it raises takes
the call out of the queue (the calls behind it move up) and reaches the caller. With eight callers queued behind
calls of a second each, a stop otherwise ended one caller per call.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from contextlib import contextmanager
from typing import Callable, Generic, Iterator, Optional, Sequence, TypeVar

ABANDON_POLL_S = 0.05  # how often a waiting call asks its ``abandon`` (the engine's readers wait for codes as often)

Item = TypeVar("Item")
Result = TypeVar("Result")


class _Call(Generic[Item, Result]):
    """One caller's place in the queue; ``item`` None: a call of its own (:meth:`VocoderTurns.turn`)."""

    __slots__ = ("deadline", "arrival", "item", "result", "error", "done", "wake")

    def __init__(self, deadline: float, arrival: int, lock: threading.Lock, item: Optional[Item] = None) -> None:
        self.deadline = float(deadline)
        self.arrival = arrival
        self.item = item
        self.result: Optional[Result] = None
        self.error: Optional[BaseException] = None
        self.done = False  # served by another caller's turn (result or error set)
        self.wake = threading.Condition(lock)  # this caller's own: woken when its turn comes or it was served

    def __lt__(self, other: _Call[Item, Result]) -> bool:
        return (self.deadline, self.arrival) < (other.deadline, other.arrival)


class VocoderTurns(Generic[Item, Result]):
    """``with turns.turn(deadline):`` runs one vocoder call when no other runs and no earlier deadline waits;
    ``turns.vocode(deadline, item)`` runs ``run([item, ...])`` in such a turn, its own or another caller's."""

    def __init__(self, max_batch: int = 1, run: Optional[Callable[[list[Item]], list[Result]]] = None,
                 fits: Optional[Callable[[Item, Item], bool]] = None) -> None:
        self.max_batch = max(1, int(max_batch))
        self._run = run  # items -> their results, in order (one vocoder call)
        self._fits = fits or (lambda _a, _b: True)  # whether the second item can share the first one's call
        # One lock; each waiting call has its own condition on it, so a turn's end wakes the caller whose turn is
        # next (and those it served), not every waiting thread: at 32 callers a shared condition woke 31 threads
        # per call to find it was not their turn.
        self._lock = threading.Lock()
        self._busy = False
        self._waiting: list[_Call[Item, Result]] = []  # heap: earliest (deadline, arrival) first
        self._arrivals = itertools.count()
        self.order: list[float] = []  # deadlines in the order their calls ran (the last 64; tests read it)
        self.batches: list[int] = []  # items per call of ``run`` (the last 64)
        self.calls = 0  # calls of ``run`` so far
        self.wakeups = 0  # times a waiting caller was woken
        self.largest = 0  # most items in one call of ``run`` so far

    @property
    def waiting(self) -> int:
        """Calls waiting for their turn now."""
        with self._lock:
            return len(self._waiting)

    @contextmanager
    def turn(self, deadline: float, abandon: Optional[Callable[[], None]] = None) -> Iterator[None]:
        """Wait for this call's turn (``deadline``: time.perf_counter() seconds when its audio is needed); ``abandon``:
        asked while waiting, raises to give the place up (module docstring)."""
        call: _Call[Item, Result] = _Call(deadline, next(self._arrivals), self._lock)
        self._take_turn(call, abandon=abandon)
        try:
            yield
        finally:
            self._give_back()

    def vocode(self, deadline: float, item: Item, abandon: Optional[Callable[[], None]] = None) -> Result:
        """``run([item])[0]``, in this caller's turn with other waiting items that fit, or in another's; ``abandon``:
        as for :meth:`turn`."""
        if self._run is None:
            raise RuntimeError("these turns were made without a run function")
        call: _Call[Item, Result] = _Call(deadline, next(self._arrivals), self._lock, item)
        batch = self._take_turn(call, gather=True, abandon=abandon)
        if batch is None:  # another caller's turn ran it
            return _outcome(call)
        try:
            results = self._run([c.item for c in batch if c.item is not None])
            for c, result in zip(batch, results):
                c.result = result
        except BaseException as exc:  # every caller in the call gets the failure; this one raises it below
            for c in batch:
                c.error = exc
        finally:
            self._give_back(served=batch[1:])
        return _outcome(call)

    # --- the queue ---------------------------------------------------------------------------
    def _take_turn(self, call: _Call[Item, Result], gather: bool = False,
                   abandon: Optional[Callable[[], None]] = None) -> Optional[list[_Call[Item, Result]]]:
        """Wait until it is ``call``'s turn: the calls it runs (itself first, then what it gathered); None when
        another caller's turn served it meanwhile. ``abandon`` is called (holding the lock: it must not use these
        turns) at every ``ABANDON_POLL_S`` of waiting."""
        with self._lock:
            heapq.heappush(self._waiting, call)
            try:
                while not call.done and (self._busy or self._waiting[0] is not call):
                    if abandon is not None:
                        abandon()
                    if call.wake.wait(None if abandon is None else ABANDON_POLL_S):
                        self.wakeups += 1
            except BaseException:  # interrupted or abandoned while waiting: leave the queue (or those behind wait)
                if call in self._waiting:
                    self._waiting.remove(call)
                    heapq.heapify(self._waiting)
                self._wake_next()
                raise
            if call.done:
                return None
            heapq.heappop(self._waiting)
            batch = [call] + (self._gather(call) if gather else [])
            self._busy = True
            self.order = (self.order + [c.deadline for c in batch])[-64:]
            if gather:
                self.batches = (self.batches + [len(batch)])[-64:]
                self.calls += 1
                self.largest = max(self.largest, len(batch))
            return batch

    def _gather(self, leader: _Call[Item, Result]) -> list[_Call[Item, Result]]:
        """Up to ``max_batch - 1`` waiting items that fit ``leader``'s call, earliest deadlines first (holding the
        condition); they leave the queue."""
        if self.max_batch == 1:
            return []
        mine = leader.item
        taken = [c for c in sorted(self._waiting) if mine is not None and c.item is not None and self._fits(mine, c.item)]
        taken = taken[:self.max_batch - 1]
        if taken:
            ids = {id(c) for c in taken}
            self._waiting = [c for c in self._waiting if id(c) not in ids]
            heapq.heapify(self._waiting)
        return taken

    def _give_back(self, served: Sequence[_Call[Item, Result]] = ()) -> None:
        with self._lock:
            for c in served:
                c.done = True
                c.wake.notify()
            self._busy = False
            self._wake_next()

    def _wake_next(self) -> None:
        """Wake the call whose turn comes next, if one waits (holding the lock)."""
        if self._waiting and not self._busy:
            self._waiting[0].wake.notify()


def _outcome(call: _Call[Item, Result]) -> Result:
    """A served call's result, or its failure raised."""
    if call.error is not None:
        raise call.error
    if call.result is None:
        raise RuntimeError("the vocoder call gave no result for this item")
    return call.result
