"""Start, find, stop and resume the training process of one run folder (knows nothing of Gradio).

The web app never trains in its own process: **Start** launches ``headless_train.py`` as a process
of its own session (``start_new_session``), so closing the browser tab, or stopping and restarting the
app, neither stops nor corrupts it. The app writes one record beside the run,
``<run_dir>/app_process.json`` (pid, the process's start time, command line, working folder), and
sends the process's output to ``<run_dir>/app_console.log``. A restarted app reads that record and
asks the operating system whether that very process (same pid *and* start time) still lives: that is
how it re-attaches. A trainer started elsewhere (a terminal) holds the run folder's lock
(xtts_ft/run_lock.py): Start then refuses with the line that names it, and when the app's own trainer
is refused (the two started at the same moment) the page shows that trainer's refusal line.
Everything else it shows comes from what the run itself writes (metrics.jsonl,
events.jsonl, checkpoints, summary.json).

**Stop** sends SIGTERM, the signal a Lightning Studio stop (and ``kill``) sends: the trainer finishes
or abandons the step, saves, and writes a ``stop`` event with the exact resume command. **Resume**
runs that command (or, when the run ended without one, the start command with ``--resume auto``
through :func:`xtts_ft.train.stopping.resume_command`, the same rule the trainer uses).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional, Sequence

import psutil
import yaml

from xtts_ft.errors import UserError
from xtts_ft.layout import RunLayout
from xtts_ft.run_history import Event, read_events
from xtts_ft.run_lock import STARTED_BY_ENV, WEB_APP, lock_holder, refusal
from xtts_ft.tempfiles import atomic_write
from xtts_ft.train.stopping import resume_command

HEADLESS_SCRIPT = "headless_train.py"


class RunProcessError(UserError):
    """A start, stop or resume the run folder's state does not allow (already running, nothing to resume)."""


@dataclass
class ProcessRecord:
    pid: int
    create_time: float  # the OS's start time of that pid: a reused pid is never mistaken for the run
    command: list[str]
    cwd: str
    started: float  # wall-clock time the app launched it
    action: str  # "start" or "resume"

    @classmethod
    def read(cls, path: Path) -> Optional[ProcessRecord]:
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            return cls(int(raw["pid"]), float(raw["create_time"]), [str(a) for a in raw["command"]],
                       str(raw["cwd"]), float(raw["started"]), str(raw.get("action", "start")))
        except FileNotFoundError:
            return None
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError):
            return None  # damaged: treated as "no process known" (the run folder itself still says what happened)


@dataclass
class RunState:
    """What the run folder and the OS say about the run right now."""

    running: bool
    pid: Optional[int]
    phase: str  # not started | running | stopped | finished | exited
    detail: str  # one line for a person
    resume_command: Optional[str]  # the command a Resume would run now (None while running)


def _alive(record: ProcessRecord) -> bool:
    try:
        proc = psutil.Process(record.pid)
        alive: bool = proc.status() != psutil.STATUS_ZOMBIE and abs(proc.create_time() - record.create_time) < 1.0
        return alive
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


class RunController:
    """The training process of ``run_dir``; ``cwd`` is where relative config paths are read from."""

    def __init__(self, run_dir: Path, cwd: Optional[Path] = None, python: str = sys.executable):
        self.run_dir = Path(run_dir)
        self.layout = RunLayout(self.run_dir)
        self.cwd = Path(cwd or Path.cwd())
        self.python = python
        self._children: dict[int, subprocess.Popen[bytes]] = {}  # processes this app started: reaped when they end
        self._launching = threading.Lock()

    # --- what is going on ------------------------------------------------------------------------
    def record(self) -> Optional[ProcessRecord]:
        return ProcessRecord.read(self.layout.app_process)

    def state(self) -> RunState:
        for pid, child in list(self._children.items()):
            if child.poll() is not None:  # reap: an ended child of this app must not linger as a zombie
                self._children.pop(pid, None)  # (page refreshes call this from several threads)
        record = self.record()
        if record is not None and _alive(record):
            return RunState(True, record.pid, "running", f"running (pid {record.pid}, {record.action})", None)
        since = record.started if record is not None else 0.0
        stops = [e for e in read_events(self.run_dir) if e.event == "stop" and (e.time or 0.0) >= since]
        summary = self.layout.summary
        if stops:
            stop = stops[-1]
            return RunState(False, None, "stopped", f"stopped at step {stop.get('step')} by {stop.get('signal')}; "
                            f"saved {stop.get('checkpoint')}", self._resume_command(stop))
        if summary.is_file() and summary.stat().st_mtime >= since:
            return RunState(False, None, "finished", self._summary_line(), self._resume_command(None))
        if record is None:
            return RunState(False, None, "not started", "no run started from the app in this folder", None)
        refused = self._refusal_line()
        if refused:  # e.g. another trainer held the run folder's lock: say why, in the trainer's own words
            return RunState(False, None, "exited", f"the process (pid {record.pid}) was refused: {refused}",
                            self._resume_command(None))
        return RunState(False, None, "exited", f"the process (pid {record.pid}) ended without a stop or a summary; "
                        f"see the log", self._resume_command(None))

    def _refusal_line(self) -> Optional[str]:
        """The first ``error:`` line the last process this app started printed (its console log), if any."""
        tail = self.log_tail(200).split("\n=== ")[-1]  # what the last start or resume printed
        errors = [line for line in tail.splitlines() if line.startswith("error: ")]
        return errors[0].removeprefix("error: ") if errors else None

    def _summary_line(self) -> str:
        try:
            summary = json.loads(self.layout.summary.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return "summary.json unreadable"
        return f"last checkpoint {summary.get('last_checkpoint')}"

    def _resume_command(self, stop: Optional[Event]) -> Optional[str]:
        if stop is not None and stop.get("resume_command"):
            return str(stop["resume_command"])
        record = self.record()
        if record is None:
            return None
        argv = record.command[2:] if len(record.command) > 1 and record.command[1].endswith(HEADLESS_SCRIPT) else []
        if not argv:
            return None
        return resume_command(record.command[:2], argv, self._config_resume())

    def _config_resume(self) -> str:
        try:
            cfg = yaml.safe_load(self.layout.config.read_text(encoding="utf-8")) or {}
            return str((cfg.get("checkpoint") or {}).get("resume", "auto"))
        except (OSError, yaml.YAMLError, AttributeError):
            return "auto"

    # --- actions ---------------------------------------------------------------------------------
    def start(self, config: Path, overrides: Sequence[str] = ()) -> ProcessRecord:
        """Launch ``headless_train.py --config CONFIG --set run.output_dir=<run_dir> --set ...``."""
        args = ["--config", str(config), "--set", f"run.output_dir={self.run_dir}"]
        for item in overrides:
            args += ["--set", item]
        return self._launch([self.python, HEADLESS_SCRIPT, *args], "start")

    def resume(self) -> ProcessRecord:
        state = self.state()
        if state.running:
            raise RunProcessError(f"{self.run_dir}: the run is still going (pid {state.pid}); stop it first")
        if not state.resume_command:
            raise RunProcessError(f"{self.run_dir}: nothing to resume; start a run first")
        return self._launch(shlex.split(state.resume_command), "resume")

    def stop(self) -> int:
        """SIGTERM to the training process (it saves and records the stop); returns its pid."""
        record = self.record()
        if record is None or not _alive(record):
            raise RunProcessError(f"{self.run_dir}: no training process is running")
        os.kill(record.pid, signal.SIGTERM)
        return record.pid

    def wait(self, timeout: float) -> bool:
        """Wait until the process has ended (True) or ``timeout`` seconds passed (False)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if not self.state().running:
                return True
            time.sleep(0.2)
        return False

    def _launch(self, command: list[str], action: str) -> ProcessRecord:
        with self._launching:  # two clicks (or two pages) at once start one process, not two
            return self._launch_one(command, action)

    def _launch_one(self, command: list[str], action: str) -> ProcessRecord:
        if self.state().running:
            raise RunProcessError(f"{self.run_dir}: a run is already going in this folder; stop it first")
        holder = lock_holder(self.run_dir)  # a trainer started elsewhere (a terminal, torchrun) holds the folder
        if holder is not None:
            raise RunProcessError(refusal(self.run_dir, holder))
        if command and command[0] in ("python", "python3"):
            command = [self.python, *command[1:]]  # the printed command names the interpreter on the PATH
        self.run_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, PYTHONUNBUFFERED="1", **{STARTED_BY_ENV: WEB_APP})  # named in the run folder's lock
        with open(self.layout.app_console, "a", encoding="utf-8") as log:
            log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {action}: {shlex.join(command)}\n")
            log.flush()
            child = subprocess.Popen(command, cwd=self.cwd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=env, start_new_session=True)
        self._children[child.pid] = child
        try:
            create_time = psutil.Process(child.pid).create_time()
        except psutil.NoSuchProcess:  # it ended at once (e.g. a config error): the log says why
            create_time = 0.0
        record = ProcessRecord(child.pid, create_time, command, str(self.cwd), time.time(), action)
        atomic_write(self.layout.app_process, json.dumps(asdict(record), indent=1, ensure_ascii=False))
        return record

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the app's console log (or train.log for a run started elsewhere)."""
        path = self.layout.app_console if self.layout.app_console.is_file() else self.run_dir / "train.log"
        if not path.is_file():
            return ""
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64_000))
            text = f.read().decode("utf-8", errors="replace")
        return "\n".join(text.replace("\r", "\n").splitlines()[-lines:])
