"""One trainer per run folder: an OS lock on the folder itself, held for the trainer's whole life.

Two trainers in one folder interleave events.jsonl, delete each other's checkpoints through
retention and lose metrics rows. So every trainer - ``headless_train.py``, ``python -m xtts_ft train``,
the web app's Start (which runs ``headless_train.py``), rank 0 under torchrun - takes an exclusive
``fcntl.flock`` on the run folder before it writes anything into it (the command line takes it right
after reading the config, before torch and coqui load), and keeps it until it ends. The kernel drops the
lock when the process ends in any way (a ``kill -9`` or a crash included), so a lock never goes stale.

The lock is on the folder, opened as a directory, not only on a file in it: a file can be deleted (by a
person or a cleanup script) while its holder runs, and a second trainer would then lock a new file of the
same name and train beside the first. A folder that holds the run cannot be swapped from under its holder
that way. ``<run_dir>/trainer.lock`` (``layout.LOCK_FILE``) is flocked too (older versions of this tool
lock only it) and holds who the holder is (pid, start time, how it was started: the command line, the
web app, torchrun); a second trainer is refused with one line naming them
(:class:`~xtts_ft.errors.RunFolderError`). Should the file be deleted anyway, the refusal reads the
holder from the kernel's lock table, and the holder writes the file again before its next checkpoint
(:func:`confirm_held`). Should the folder itself be moved, deleted or replaced, the holder notices there
and stops with one line instead of writing into a folder that is no longer its own.
Where the file system cannot lock a folder (NFS locks only files opened for writing), the file alone is
locked, and a holder whose file was deleted stops at its next checkpoint instead.

Readers never take the lock: evaluate, export, the server and the web app's views work while a
trainer holds it. :func:`lock_holder` reads the file and asks the OS whether that very process
(same pid and start time) still lives.

Within one process the lock is re-entrant (the command line takes it, then the pipeline inside it):
the innermost release leaves it held, the outermost lets it go. A process forked from the holder (a
data-loader or prepare worker) closes its copies of the descriptors at once: otherwise a worker outliving
a killed trainer by seconds would keep the folder locked for the next one. (Closing a copy never unlocks
it for the holder; only the holder's own release or end does.)
The lock file is written in place, not through ``tempfiles.atomic_write``: the lock belongs to the
file's inode, and a file swapped in by a rename would be another one. It is never deleted by this tool.
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
from typing import Mapping, Optional

import psutil

from xtts_ft.errors import RunFolderError
from xtts_ft.layout import RunLayout

log = logging.getLogger(__name__)

#: Set by the web app in the environment of the trainer it starts (the value says who: "web app").
STARTED_BY_ENV = "XTTS_FT_STARTED_BY"
WEB_APP = "web app"

_COMMAND_CHARS = 300  # a longer command line is cut in the refusal line
_WAIT_FOR_HOLDER_S = 3.0  # a holder that has just taken the lock writes its line a moment later
_SWAP_TRIES = 5  # trainer.lock replaced between our open and our flock this often in a row: someone keeps at it
_PROC_LOCKS = Path("/proc/locks")  # the kernel's table of file locks (Linux)
_TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


@dataclass
class _Held:
    """A lock this process holds on one run folder."""

    folder_fd: Optional[int]  # the run folder itself, flocked; None where its file system cannot lock a folder
    file_fd: int  # trainer.lock, flocked, holding ``line``
    line: bytes  # who holds it, as written into trainer.lock (written again if the file is deleted)
    depth: int = 1

    def close(self) -> None:
        for fd in (self.file_fd, self.folder_fd):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError as exc:
                    log.debug("lock descriptor %d already closed (%s)", fd, exc)


_held: dict[str, _Held] = {}  # resolved run folder -> the lock this process holds on it
_fork_hook: list[bool] = []  # [True] once the forked-child hook is registered (at the first lock, not at import)


class _Busy(Exception):
    """Another process holds the lock (turned into the refusal line by the caller)."""


def _forget_in_child() -> None:
    """In a child forked from a holder: close its copies of the descriptors (never unlock: that would free them for
    the parent too), so the lock ends with the trainer itself."""
    for held in _held.values():
        held.close()
    _held.clear()


@dataclass(frozen=True)
class LockHolder:
    """Who holds (or last held) a run folder's lock, as the holder wrote it (or as the OS says, see above)."""

    pid: int
    create_time: float  # the OS's start time of that pid: a reused pid is never taken for the holder
    started_as: str  # "the command line: python headless_train.py ...", "the web app: ...", "torchrun (2 ...): ..."
    since: str  # when it took the lock (local time, for a person)

    def describe(self) -> str:
        return f"pid {self.pid}, since {self.since}, started from {self.started_as}"


def how_started(proc: Optional[psutil.Process] = None) -> str:
    """How a process (default: this one) was started, for the lock file: the web app, torchrun or the command line,
    and its command."""
    environ: Mapping[str, str] = os.environ
    try:
        command = shlex.join((proc or psutil.Process()).cmdline())
        if proc is not None:
            environ = proc.environ()
    except (psutil.Error, OSError):
        command = shlex.join([sys.executable, *sys.argv]) if proc is None else f"pid {proc.pid}"
    command = " ".join(command.split())  # one line, whatever the arguments hold
    if len(command) > _COMMAND_CHARS:
        command = command[:_COMMAND_CHARS] + " ..."
    by = environ.get(STARTED_BY_ENV)
    if by:
        return f"the {by}: {command}"
    world = int(environ.get("WORLD_SIZE", "1") or 1)
    if world > 1 or environ.get("TORCHELASTIC_RUN_ID"):
        return f"torchrun ({world} processes): {command}"
    return f"the command line: {command}"


def _read_holder(path: Path) -> Optional[LockHolder]:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return LockHolder(int(raw["pid"]), float(raw["create_time"]), str(raw["started_as"]), str(raw["since"]))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError):
        return None  # empty (released, or the holder is writing it), deleted, or not a file this tool wrote


def _alive(holder: LockHolder) -> bool:
    try:
        proc = psutil.Process(holder.pid)
        alive: bool = proc.status() != psutil.STATUS_ZOMBIE and abs(proc.create_time() - holder.create_time) < 1.0
        return alive
    except psutil.Error:
        return False


def _has_open(pid: int, target: os.stat_result) -> bool:
    """Whether process ``pid`` has the file or folder ``target`` open (its /proc/PID/fd links, followed)."""
    fds = Path(f"/proc/{pid}/fd")
    try:
        names = os.listdir(fds)
    except OSError:
        return False
    for name in names:
        try:
            st = os.stat(fds / name)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (target.st_dev, target.st_ino):
            return True
    return False


def _holder_from_os(run_dir: Path) -> Optional[LockHolder]:
    """The live process holding the flock on ``run_dir`` itself, from the kernel's lock table, when trainer.lock does
    not say (it was deleted); its start time stands for "since". None where the table cannot be read."""
    try:
        folder = os.stat(run_dir)
        table = _PROC_LOCKS.read_text(encoding="ascii", errors="replace").splitlines()
    except OSError:
        return None
    for row in table:
        # "1: FLOCK  ADVISORY  WRITE 4242 fe:00:2203953 0 EOF" (a waiter's row has "->" after the number)
        fields = row.split()
        if len(fields) < 6 or fields[1] != "FLOCK" or fields[3] != "WRITE" or not fields[4].isdigit():
            continue
        if fields[5].rpartition(":")[2] != str(folder.st_ino) or not _has_open(int(fields[4]), folder):
            continue
        try:
            proc = psutil.Process(int(fields[4]))
            started = proc.create_time()
        except psutil.Error:
            continue
        return LockHolder(proc.pid, started, how_started(proc), time.strftime(_TIME_FORMAT, time.localtime(started)))
    return None


def lock_holder(run_dir: Path) -> Optional[LockHolder]:
    """The live trainer holding ``run_dir``'s lock, or None; reads only (never takes the lock, so a reader such as
    the web app never makes a trainer that starts at that moment fail)."""
    holder = _read_holder(RunLayout(run_dir).lock_file)
    if holder is not None and _alive(holder):
        return holder
    return _holder_from_os(Path(run_dir))


def refusal(run_dir: Path, holder: Optional[LockHolder]) -> str:
    """The one line a second trainer is refused with."""
    live = holder is not None and _alive(holder)
    if holder is None:
        who = "a process that did not say who it is"
    elif live:
        who = holder.describe()
    else:
        who = f"last {holder.describe()}, which has ended: a process it started still holds the lock"
    stop = f" (kill -TERM {holder.pid}: it saves, then stops)" if holder is not None and live else ""
    return (f"{run_dir}: another trainer is using this run folder ({who}); one trainer per run folder: wait until it "
            f"ends or stop it{stop}, then run this command again, or give this run its own run.output_dir")


def _cannot(run_dir: Path, exc: OSError, doing: str) -> str:
    why = exc.strerror or type(exc).__name__
    other = exc.filename is not None and str(exc.filename) != str(run_dir)
    return (f"{run_dir}: cannot {doing} the run folder ({why}{f': {exc.filename}' if other else ''}); set "
            f"run.output_dir to a folder this user can create and write, e.g. --set run.output_dir=runs/NAME")


def make_run_folder(run_dir: Path) -> Path:
    """``run_dir``, created with its parents if needed; one line naming it and what to do when it cannot be."""
    try:
        Path(run_dir).mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # /proc/x, no permission, a file of that name in the way
        raise RunFolderError(_cannot(Path(run_dir), exc, "create")) from None
    return Path(run_dir)


def _names(path: Path, fd: int) -> bool:
    """Whether ``path`` still names the file or folder open as ``fd`` (not deleted, moved or replaced)."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


def _lock_folder(run_dir: Path) -> Optional[int]:
    """The run folder opened and flocked; None where its file system cannot lock a folder. Raises _Busy."""
    fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise _Busy from None
    except OSError as exc:  # EBADF on NFS (it emulates flock with write locks) and the like: the file alone guards
        os.close(fd)
        log.debug("%s: this file system cannot lock a folder (%s); locking %s alone", run_dir, exc,
                  RunLayout(run_dir).lock_file.name)
        return None
    return fd


def _lock_file(path: Path) -> int:
    """trainer.lock opened (created if missing) and flocked, checked to be the file its path names. Raises _Busy."""
    for _ in range(_SWAP_TRIES):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise _Busy from None
        except BaseException:
            os.close(fd)
            raise
        if _names(path, fd):
            return fd
        os.close(fd)  # deleted or replaced between our open and our flock: lock the file the path names now
    raise RunFolderError(f"{path}: deleted or replaced {_SWAP_TRIES} times while this trainer locked it; another "
                         f"program keeps changing the run folder: stop it, then run this command again")


def _wait_for_holder(run_dir: Path) -> Optional[LockHolder]:
    path = RunLayout(run_dir).lock_file
    end = time.monotonic() + _WAIT_FOR_HOLDER_S
    while True:
        holder = _read_holder(path)
        if holder is not None and _alive(holder):
            return holder
        # a deleted file is written again only at the holder's next checkpoint: ask the kernel at once
        if not path.exists() or time.monotonic() > end:
            return _holder_from_os(run_dir) or holder
        time.sleep(0.1)


def _key(run_dir: Path) -> str:
    return str(Path(run_dir).resolve())


class RunLock:
    """The trainer's lock on one run folder: ``acquire()`` before anything is written, ``release()`` at the end
    (or ``with RunLock(run_dir):``). Re-entrant within a process; ``release`` undoes only this object's acquire."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self._key = _key(self.run_dir)
        self.acquired = False

    def acquire(self) -> RunLock:
        """Lock the folder (created if needed); RunFolderError with one line when another trainer holds it or the
        folder cannot be created or written."""
        if self.acquired:
            return self
        held = _held.get(self._key)
        if held is not None:
            held.depth += 1
            self.acquired = True
            return self
        make_run_folder(self.run_dir)
        folder_fd: Optional[int] = None
        try:
            folder_fd = _lock_folder(self.run_dir)
            file_fd = _lock_file(RunLayout(self.run_dir).lock_file)
        except _Busy:
            _close(folder_fd)
            raise RunFolderError(refusal(self.run_dir, _wait_for_holder(self.run_dir))) from None
        except OSError as exc:  # a folder this user may not read or write in
            _close(folder_fd)
            raise RunFolderError(_cannot(self.run_dir, exc, "write in")) from None
        except BaseException:
            _close(folder_fd)
            raise
        me = psutil.Process()
        line = json.dumps(asdict(LockHolder(me.pid, me.create_time(), how_started(), time.strftime(_TIME_FORMAT))),
                          ensure_ascii=False).encode("utf-8") + b"\n"
        _write_line(file_fd, line)
        _held[self._key] = _Held(folder_fd, file_fd, line)
        if not _fork_hook and hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_forget_in_child)
            _fork_hook.append(True)
        self.acquired = True
        return self

    def release(self) -> None:
        if not self.acquired:
            return
        self.acquired = False
        held = _held.get(self._key)
        if held is None:
            return
        held.depth -= 1
        if held.depth > 0:
            return
        del _held[self._key]
        try:
            os.ftruncate(held.file_fd, 0)  # no holder any more (a kill leaves the line; lock_holder checks that pid)
        except OSError as exc:  # the folder went away or is read-only now: the lock is released all the same
            log.debug("could not clear %s: %s", RunLayout(self.run_dir).lock_file, exc)
        finally:
            held.close()  # closing the last descriptors releases the flocks

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _close(fd: Optional[int]) -> None:
    if fd is not None:
        os.close(fd)


def _write_line(fd: int, line: bytes) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, line, 0)


def confirm_held(run_dir: Path) -> None:
    """The holder's check before each checkpoint: ``run_dir`` is still the folder it locked.

    Nothing to do in a process that does not hold it (another rank, a test calling the trainer directly). A
    deleted trainer.lock is written again (the folder stayed locked: no other trainer came in). A folder moved,
    deleted or replaced - or, where folders cannot be locked, a lock file replaced - is a RunFolderError: the
    trainer stops instead of writing into a folder that may now be another trainer's.
    """
    held = _held.get(_key(run_dir))
    if held is None:
        return
    run_dir, lock_file = Path(run_dir), RunLayout(run_dir).lock_file
    if held.folder_fd is not None and not _names(run_dir, held.folder_fd):
        raise RunFolderError(f"{run_dir}: this run folder was moved, deleted or replaced while this trainer (pid "
                             f"{os.getpid()}) used it, so it writes nothing more there; put the folder back and run "
                             f"the same command again to resume, or give a new run its own run.output_dir")
    if _names(lock_file, held.file_fd):
        return
    if held.folder_fd is None:
        raise RunFolderError(f"{lock_file}: deleted or replaced while this trainer (pid {os.getpid()}) held it, and "
                             f"the file system of {run_dir} cannot lock the folder itself: another trainer may have "
                             f"started there; stopping before the two overwrite each other's checkpoints. Make sure "
                             f"no other trainer uses the folder, then run the same command again to resume")
    try:
        fd = _lock_file(lock_file)
    except _Busy:  # an older version of this tool, which locks only the file, started after the deletion
        raise RunFolderError(refusal(run_dir, _wait_for_holder(run_dir))) from None
    except OSError as exc:
        raise RunFolderError(_cannot(run_dir, exc, "write in")) from None
    _write_line(fd, held.line)
    os.close(held.file_fd)
    held.file_fd = fd
    log.warning("%s was deleted while this trainer held the run folder; written again (the folder itself stayed "
                "locked: no other trainer could start in it)", lock_file)


def refuse_if_held_elsewhere(run_dir: Path) -> None:
    """For a torchrun rank other than 0, which does not lock (rank 0 does): refused with the holder's line at once
    when a trainer outside this torchrun holds ``run_dir``, before it loads anything. The holder counts as this
    torchrun's own rank 0 when it has the same parent (the torchrun agent that started both)."""
    holder = lock_holder(run_dir)
    if holder is None or holder.pid == os.getpid():
        return
    try:
        if psutil.Process(holder.pid).ppid() == os.getppid():
            return
    except psutil.Error:
        return  # it has just ended
    raise RunFolderError(refusal(run_dir, holder))
