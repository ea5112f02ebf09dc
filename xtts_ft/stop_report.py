"""What a stop noticed outside the training loop leaves behind: one console line and one events.jsonl record.

A stage without a training loop running (prepare, evaluate, the pipeline between stages) reports a
stop with :func:`report_stop`: the line names the signal, what was running, what is kept and the
command that continues. :func:`python_command` is how those commands name the interpreter. The stop's
events.jsonl line goes through the run-history module's appender (xtts_ft/run_history.py), like every event.

Foundation level: nothing here imports torch, so a command's error and stop handling
(xtts_ft/commands/common.py) costs a light command nothing.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Optional

from xtts_ft.json_types import JsonValue
from xtts_ft.run_history import Event, append_event

log = logging.getLogger(__name__)


def python_command() -> str:
    """``python`` when that is this interpreter on the PATH, else the interpreter's full path."""
    for name in ("python", "python3"):
        found = shutil.which(name)
        if found and os.path.realpath(found) == os.path.realpath(sys.executable):
            return name
    return sys.executable


def write_stop_event(run_dir: Path, record: Mapping[str, JsonValue]) -> None:
    """events.jsonl line for a stop before the metrics logger exists (setup, or a stage before training).

    Written only into a run folder that exists: a stop before the folder was claimed leaves nothing behind.
    """
    if Path(run_dir).is_dir():
        fields = {k: v for k, v in record.items() if k not in ("step", "event")}
        step = record.get("step")
        append_event(run_dir, Event.now(str(record["event"]), step if isinstance(step, int) else None, fields))


def report_stop(where: str, signal_name: Optional[str], hint: str, *, run_dir: Optional[Path] = None,
                step: int = 0, saved: str = "nothing new to save", checkpoint: Optional[Path] = None) -> None:
    """The one console line (and events.jsonl record) of a stop noticed outside the training loop."""
    log.warning("stopped by %s during %s; %s. Resume with: %s", signal_name, where, saved, hint)
    if run_dir is not None:
        write_stop_event(run_dir, {"step": step, "event": "stop", "signal": signal_name, "during": where,
                                   "checkpoint": str(checkpoint) if checkpoint is not None else None,
                                   "resume_command": hint})
