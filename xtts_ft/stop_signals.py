"""SIGINT / SIGTERM: the first one asks for a clean stop, a second one stops at once.

``StopSignals`` is a context manager entered once for a whole command (``headless_train.py``,
``python -m xtts_ft train/prepare/evaluate``: see commands/common.py); ``train()`` enters the active one again
(``StopSignals.shared()``) or, called directly, a new one. It installs the handlers on the first
entry and puts the previous ones back on the last exit, so importing the package changes nothing.
The first signal only sets ``requested``. Long work checks it within seconds wherever the command
is: prepare between clips, the pipeline between stages, the DVAE code cache between batches, the
training loop between micro-batches, evaluation between batches and samples, synthesis at every
generated token, the batch-size probe between tries. Work that cannot finish raises
:class:`StopRequested` (``raise_if_stopped``): the training loop catches it, saves the last
finished step and returns; outside the loop the pipeline catches it (``xtts_ft.stop_report``),
prints the resume command and the command exits 0. A second signal raises ``KeyboardInterrupt``
from the handler (every write is atomic, so even that leaves earlier files intact).

While a ``StopSignals`` is entered it is the *active* one: ``stop_requested()`` lets code far from
the loop (the evaluation hook, synthesis, prepare) ask it without being handed it. Outside a
command there is none and ``stop_requested()`` is always False.

Handlers can only be installed from the main thread; elsewhere (e.g. a notebook worker thread)
the context manager does nothing and only ``request()`` stops the run.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from types import FrameType
from typing import Callable, Iterator, Optional, Union

log = logging.getLogger(__name__)

SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: What ``signal.signal`` returns and takes: a handler, SIG_DFL / SIG_IGN, or None (set outside Python).
SignalHandler = Union[Callable[[int, Optional[FrameType]], object], int, None]


class StopRequested(BaseException):
    """Raised by work abandoned for a stop request. A BaseException, like KeyboardInterrupt, so that handlers
    of ordinary failures (``except Exception`` around the evaluation hook) do not swallow it."""


_active: list[StopSignals] = []  # entered StopSignals, innermost last (empty outside a command)


def stop_requested() -> bool:
    """Whether the running command was asked to stop (False outside a command)."""
    return bool(_active) and _active[-1].requested


def stopping_enabled() -> bool:
    """Whether a command that honours stop requests is running (so checks for them are worth placing)."""
    return bool(_active)


def raise_if_stopped(where: str) -> None:
    """Abandon the current piece of work (``where`` names it) when a stop was requested."""
    if stop_requested():
        raise StopRequested(where)


def active_signals() -> Optional[StopSignals]:
    """The innermost entered StopSignals, or None outside a command."""
    return _active[-1] if _active else None


class StopSignals:
    def __init__(self) -> None:
        self.requested = False
        self.signal_name: Optional[str] = None
        self._previous: dict[int, SignalHandler] = {}
        self._depth = 0  # entered this many times (the command, then train() inside it)

    @classmethod
    def shared(cls) -> StopSignals:
        """The command's active StopSignals (entering it again is allowed), or a new one outside a command."""
        return active_signals() or cls()

    def _handle(self, signum: int, _frame: Optional[FrameType]) -> None:
        name = signal.Signals(signum).name
        if self.requested:
            raise KeyboardInterrupt(f"second stop signal ({name}): stopping at once")
        self.requested = True
        self.signal_name = name
        log.warning("%s received: finishing or abandoning the current step of work, then stopping "
                    "(send it again to stop at once)", name)

    def request(self, name: str = "request") -> None:
        """Ask for a clean stop without a signal (tests, embedding applications)."""
        self.requested = True
        self.signal_name = name

    def __enter__(self) -> StopSignals:
        self._depth += 1
        if self._depth > 1:  # already installed by the command around this (e.g. train() inside the pipeline)
            return self
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        _active.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1
        if self._depth > 0:
            return
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()
        if self in _active:
            _active.remove(self)


def ignore_stop_signals(*_args: object) -> None:
    """For worker processes (data loader, prepare): the command's own process alone decides when to stop.

    A Ctrl-C reaches every process of the terminal's group; workers ignore it, finish their clip or
    are shut down by the main process, and print nothing. Takes and ignores arguments so it can be a
    ``worker_init_fn`` or a pool ``initializer`` as it is. A signal held back while the worker started
    (:func:`held_while_starting_workers`) is discarded here.
    """
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)


@contextlib.contextmanager
def held_while_starting_workers() -> Iterator[None]:
    """Hold SIGINT/SIGTERM back while worker processes start; they reach this process when it ends.

    A spawned worker imports for seconds before its initializer can ignore the signals; a Ctrl-C then
    would print a KeyboardInterrupt traceback from it. Held (blocked) signals stay held in the new
    process until :func:`ignore_stop_signals` discards them; this process gets its own at the end of
    the block, so no stop request is lost. The mask is the calling thread's (the one that starts the workers,
    which is what they inherit): a signal sent to the whole process may still be delivered through another
    thread of it (torch's, a loader's) and handled at once, which is harmless. Only where the platform can
    block signals (POSIX).
    """
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
