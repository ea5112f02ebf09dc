"""SIGINT / SIGTERM: the first one asks for a clean stop, a second one stops at once.

``StopSignals`` is a context manager used only inside ``train()``: it installs the handlers on
entry and puts the previous ones back on exit, so importing the package changes nothing. The
first signal only sets ``requested``; the loop finishes the current optimizer step, saves a
checkpoint and returns. A second signal raises ``KeyboardInterrupt`` from the handler (checkpoint
writes are atomic, so even that leaves the previous checkpoints intact).

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
        log.warning("%s received: finishing the current step, then saving a checkpoint (send it again to stop at once)",
                    name)

    def request(self, name: str = "request") -> None:
        """Ask for a clean stop without a signal (tests, embedding applications)."""
        self.requested = True
        self.signal_name = name

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()


def ignore_stop_signals() -> None:
    """For data-loader worker processes: the training process alone decides when to stop."""
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
