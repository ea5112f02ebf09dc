"""SIGINT / SIGTERM: the first one asks for a clean stop, a second one stops at once.

``StopSignals`` is a context manager used only inside ``train()``: it installs the handlers on
entry and puts the previous ones back on exit, so importing the package changes nothing. The
first signal only sets ``requested``. Long work checks it within seconds wherever the run is:
the loop between micro-batches, evaluation between batches and samples, synthesis at every
generated token, the batch-size probe between tries. Work that cannot finish raises
:class:`StopRequested` (``raise_if_stopped``), which the loop catches; it then saves the last
finished step and returns. A second signal raises ``KeyboardInterrupt`` from the handler
(checkpoint writes are atomic, so even that leaves the previous checkpoints intact).

While a ``StopSignals`` is entered it is the *active* one: ``stop_requested()`` lets code far from
the loop (the evaluation hook, synthesis) ask it without being handed it. Outside training there is
none and ``stop_requested()`` is always False.

Handlers can only be installed from the main thread; elsewhere (e.g. a notebook worker thread)
the context manager does nothing and only ``request()`` stops the run.
"""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any, Optional

log = logging.getLogger(__name__)

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequested(BaseException):
    """Raised by work abandoned for a stop request. A BaseException, like KeyboardInterrupt, so that handlers
    of ordinary failures (``except Exception`` around the evaluation hook) do not swallow it."""


_active: list[StopSignals] = []  # entered StopSignals, innermost last (empty outside train())


def stop_requested() -> bool:
    """Whether the active training run was asked to stop (False outside training)."""
    return bool(_active) and _active[-1].requested


def stopping_enabled() -> bool:
    """Whether a training run that honours stop requests is active (so checks for them are worth placing)."""
    return bool(_active)


def raise_if_stopped(where: str) -> None:
    """Abandon the current piece of work (``where`` names it) when a stop was requested."""
    if stop_requested():
        raise StopRequested(where)


class StopSignals:
    def __init__(self) -> None:
        self.requested = False
        self.signal_name: Optional[str] = None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, _frame) -> None:
        name = signal.Signals(signum).name
        if self.requested:
            raise KeyboardInterrupt(f"second stop signal ({name}): stopping at once")
        self.requested = True
        self.signal_name = name
        log.warning("%s received: saving the last finished step, then stopping (send it again to stop at once)", name)

    def request(self, name: str = "request") -> None:
        """Ask for a clean stop without a signal (tests, embedding applications)."""
        self.requested = True
        self.signal_name = name

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        _active.append(self)
        return self

    def __exit__(self, *exc) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()
        if self in _active:
            _active.remove(self)


def ignore_stop_signals() -> None:
    """For data-loader worker processes: the training process alone decides when to stop."""
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
