"""What a stop noticed outside the training loop leaves behind: one console line and one events.jsonl record.

A stage without a training loop running (prepare, evaluate, the pipeline between stages) reports a
stop with :func:`report_stop`: the line names the signal, what was running, what is kept and the
command that continues. :func:`python_command` is how those commands name the interpreter. The stop's events.jsonl line is
the same one train/metrics.py's ``append_event`` writes (that module loads torch, so it is not imported
here; where the run-history module owns events.jsonl, this goes through its appender).

Foundation level: nothing here imports torch, so a command's error and stop handling
(xtts_ft/commands/common.py) costs a light command nothing.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Optional

from xtts_ft.layout import RunLayout

log = logging.getLogger(__name__)


def python_command() -> str:
    """``python`` when that is this interpreter on the PATH, else the interpreter's full path."""
    for name in ("python", "python3"):
        found = shutil.which(name)
        if found and os.path.realpath(found) == os.path.realpath(sys.executable):
            return name
    return sys.executable


def _append_event(run_dir: Path, record: dict[str, object]) -> None:
    """One line of ``<run_dir>/events.jsonl``, as train/metrics.py's ``append_event`` writes it."""
    with RunLayout(run_dir).events.open("a", encoding="utf-8") as f:
        f.write(json.dumps({**record, "time": time.time()}, default=str, ensure_ascii=False) + "\n")


def write_stop_event(run_dir: Path, record: dict[str, object]) -> None:
    """events.jsonl line for a stop before the metrics logger exists (setup, or a stage before training).

    Written only into a run folder that exists: a stop before the folder was claimed leaves nothing behind.
    """
    if Path(run_dir).is_dir():
        _append_event(run_dir, record)


def report_stop(where: str, signal_name: Optional[str], hint: str, *, run_dir: Optional[Path] = None,
                step: int = 0, saved: str = "nothing new to save", checkpoint: Optional[Path] = None) -> None:
    """The one console line (and events.jsonl record) of a stop noticed outside the training loop."""
    log.warning("stopped by %s during %s; %s. Resume with: %s", signal_name, where, saved, hint)
    if run_dir is not None:
        write_stop_event(run_dir, {"step": step, "event": "stop", "signal": signal_name, "during": where,
                                   "checkpoint": str(checkpoint) if checkpoint is not None else None,
                                   "resume_command": hint})
