"""One trainer per run folder: an OS lock on the folder, held for the trainer's whole life.

Two trainers in one folder interleave events.jsonl, delete each other's checkpoints through
retention and lose metrics rows. So every trainer - ``headless_train.py``, ``python -m xtts_ft train``,
the web app's Start (which runs ``headless_train.py``), rank 0 under torchrun - takes an exclusive
``fcntl.flock`` on ``<run_dir>/trainer.lock`` (``layout.LOCK_FILE``) before it writes anything into the
folder, and keeps it until it ends. The kernel drops the lock when the process ends in any way (a
``kill -9`` or a crash included), so a lock never goes stale. The holder writes into the file who it
is (pid, start time, how it was started: the command line, the web app, torchrun); a second trainer
is refused with one line naming them (:class:`~xtts_ft.errors.RunFolderError`).

Readers never take the lock: evaluate, export, the server and the web app's views work while a
trainer holds it. :func:`lock_holder` reads the file and asks the OS whether that very process
(same pid and start time) still lives.

Within one process the lock is re-entrant (the command line takes it, then the pipeline inside it):
the innermost release leaves it held, the outermost lets it go. A process forked from the holder (a
data-loader or prepare worker) closes its copy of the file at once: otherwise a worker outliving a
killed trainer by seconds would keep the folder locked for the next one. (Closing a copy never unlocks
it for the holder; only the holder's own release or end does.)
The lock file is written in place, not through ``tempfiles.atomic_write``: the lock belongs to the
file's inode, and a file swapped in by a rename would be another one. It is never deleted (a process
could be opening the old file at that moment and lock a file nobody else sees).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shlex
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

import psutil

from xtts_ft.errors import RunFolderError
from xtts_ft.layout import RunLayout

log = logging.getLogger(__name__)

#: Set by the web app in the environment of the trainer it starts (the value says who: "web app").
STARTED_BY_ENV = "XTTS_FT_STARTED_BY"
WEB_APP = "web app"

_COMMAND_CHARS = 300  # a longer command line is cut in the refusal line
_WAIT_FOR_HOLDER_S = 3.0  # a holder that has just taken the lock writes its line a moment later

_held: dict[str, list] = {}  # resolved run folder -> [file descriptor, depth] of the locks this process holds
_fork_hook: list[bool] = []  # [True] once the forked-child hook is registered (at the first lock, not at import)


def _forget_in_child() -> None:
    """In a child forked from a holder: close its copies of the lock files (never unlock: that would free them for
    the parent too), so the lock ends with the trainer itself."""
    for fd, _depth in _held.values():
        try:
            os.close(fd)
        except OSError as exc:
            log.debug("forked child: lock file descriptor %d already closed (%s)", fd, exc)
    _held.clear()


@dataclass(frozen=True)
class LockHolder:
    """Who holds (or last held) a run folder's lock, as the holder wrote it."""

    pid: int
    create_time: float  # the OS's start time of that pid: a reused pid is never taken for the holder
    started_as: str  # "the command line: python headless_train.py ...", "the web app: ...", "torchrun (2 ...): ..."
    since: str  # when it took the lock (local time, for a person)

    def describe(self) -> str:
        return f"pid {self.pid}, since {self.since}, started from {self.started_as}"


def how_started() -> str:
    """How this process was started, for the lock file: the web app, torchrun or the command line, and its command."""
    try:
        command = shlex.join(psutil.Process().cmdline())
    except (psutil.Error, OSError):
        command = shlex.join([sys.executable, *sys.argv])
    command = " ".join(command.split())  # one line, whatever the arguments hold
    if len(command) > _COMMAND_CHARS:
        command = command[:_COMMAND_CHARS] + " ..."
    by = os.environ.get(STARTED_BY_ENV)
    if by:
        return f"the {by}: {command}"
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if world > 1 or os.environ.get("TORCHELASTIC_RUN_ID"):
        return f"torchrun ({world} processes): {command}"
    return f"the command line: {command}"


def _read_holder(path: Path) -> Optional[LockHolder]:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return LockHolder(int(raw["pid"]), float(raw["create_time"]), str(raw["started_as"]), str(raw["since"]))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError):
        return None  # empty (released, or the holder is writing it), or not a file this tool wrote


def _alive(holder: LockHolder) -> bool:
    try:
        proc = psutil.Process(holder.pid)
        return proc.status() != psutil.STATUS_ZOMBIE and abs(proc.create_time() - holder.create_time) < 1.0
    except psutil.Error:
        return False


def lock_holder(run_dir: Path) -> Optional[LockHolder]:
    """The live trainer holding ``run_dir``'s lock, or None; reads only (never takes the lock, so a reader such as
    the web app never makes a trainer that starts at that moment fail)."""
    holder = _read_holder(RunLayout(run_dir).lock_file)
    return holder if holder is not None and _alive(holder) else None


def refusal(run_dir: Path, holder: Optional[LockHolder]) -> str:
    """The one line a second trainer is refused with."""
    live = holder is not None and _alive(holder)
    who = (holder.describe() if live else f"last {holder.describe()}, which has ended: a process it started still "
           f"holds the lock" if holder is not None else "a process that did not say who it is")
    stop = f" (kill -TERM {holder.pid}: it saves, then stops)" if live else ""
    return (f"{run_dir}: another trainer is using this run folder ({who}); one trainer per run folder: wait until it "
            f"ends or stop it{stop}, then run this command again, or give this run its own run.output_dir")


class RunLock:
    """The trainer's lock on one run folder: ``acquire()`` before anything is written, ``release()`` at the end
    (or ``with RunLock(run_dir):``). Re-entrant within a process; ``release`` undoes only this object's acquire."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self._key = str(self.run_dir.resolve())
        self.acquired = False

    def acquire(self) -> RunLock:
        if self.acquired:
            return self
        if self._key in _held:
            _held[self._key][1] += 1
            self.acquired = True
            return self
        layout = RunLayout(self.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(layout.lock_file, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RunFolderError(refusal(self.run_dir, self._wait_for_holder(layout.lock_file))) from None
        except BaseException:
            os.close(fd)
            raise
        me = psutil.Process()
        line = json.dumps(asdict(LockHolder(me.pid, me.create_time(), how_started(), time.strftime("%Y-%m-%d %H:%M:%S"))),
                          ensure_ascii=False).encode("utf-8")
        os.ftruncate(fd, 0)
        os.pwrite(fd, line + b"\n", 0)
        _held[self._key] = [fd, 1]
        if not _fork_hook and hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_forget_in_child)
            _fork_hook.append(True)
        self.acquired = True
        return self

    @staticmethod
    def _wait_for_holder(path: Path) -> Optional[LockHolder]:
        end = time.monotonic() + _WAIT_FOR_HOLDER_S
        while True:
            holder = _read_holder(path)
            if (holder is not None and _alive(holder)) or time.monotonic() > end:
                return holder
            time.sleep(0.1)

    def release(self) -> None:
        if not self.acquired:
            return
        self.acquired = False
        entry = _held.get(self._key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] > 0:
            return
        fd = _held.pop(self._key)[0]
        try:
            os.ftruncate(fd, 0)  # no holder any more (a kill leaves the line; lock_holder checks that pid's life)
        except OSError as exc:  # the folder went away or is read-only now: the lock is released all the same
            log.debug("could not clear %s: %s", RunLayout(self.run_dir).lock_file, exc)
        finally:
            os.close(fd)  # closing the last descriptor releases the flock

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
