"""The project's one atomic file write, through temporary siblings named per process.

:func:`atomic_write` writes a file to ``<name>.<host>-<pid>.part`` beside its final path and
renames it into place, so a reader sees the old file or the new one, never half of one.
With a fixed name (``<name>.part``) two processes writing the same output (two ranks of a
``torchrun`` launch, two runs pointed at one folder) rename each other's half-written files or
find theirs gone. Clean-up of leftovers (:func:`remove_stray_parts`) deletes only files whose
writer is dead: a process on this host that no longer exists, or an old-style name without an
owner. Files of live processes, and of other hosts (whose pids mean nothing here), are left alone.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
from pathlib import Path
from typing import BinaryIO, Callable, Union

PART = "part"
_STAGED = re.compile(r"^\.(?P<name>.+)\.(?P<purpose>[a-z]+)-(?P<host>[A-Za-z0-9_-]+)-(?P<pid>\d+)$")
_OWNED = re.compile(r"\.(?P<host>[A-Za-z0-9_-]+)-(?P<pid>\d+)\.part$")


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname())[:40] or "host"


def staging_sibling(path: Path, purpose: str) -> Path:
    """``.<name>.<purpose>-<host>-<pid>`` beside ``path``: the one name of a folder this process is writing
    (``new``), swapping out (``old``) or deleting (``trash``); :func:`staging_writer_dead` reads it back."""
    path = Path(path)
    return path.with_name(f".{path.name}.{purpose}-{_host()}-{os.getpid()}")


def staging_writer_dead(path: Path) -> bool:
    """True for a :func:`staging_sibling` whose writing process on this host no longer exists (other hosts'
    folders, this process's own and names of any other form are never dead)."""
    match = _STAGED.match(Path(path).name)
    if match is None or match["host"] != _host():
        return False
    return int(match["pid"]) != os.getpid() and not process_alive(int(match["pid"]))


def temp_sibling(path: Path) -> Path:
    """``path``'s temporary twin for this process: ``<name>.<host>-<pid>.part`` in the same folder."""
    path = Path(path)
    return path.with_name(f"{path.name}.{_host()}-{os.getpid()}.{PART}")


Content = Union[bytes, str, Callable[[BinaryIO], None]]


def fsync_dir(folder: Path) -> None:
    """Make a rename or a new entry in ``folder`` survive power loss (a no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, content: Content, *, durable: bool = False) -> None:
    """Write ``path`` whole or not at all: into :func:`temp_sibling`, then ``os.replace``.

    ``content`` is bytes, text (written as UTF-8, newlines as given) or a function that writes to
    the open binary file. ``durable=True`` also fsyncs the file before the rename and the folder
    after it, for files a power cut must not lose (checkpoints, run.json); without it a crash
    can lose the new file but still never leaves half of one. A failed write removes its temp file.
    """
    path = Path(path)
    tmp = temp_sibling(path)
    try:
        with open(tmp, "wb") as f:
            if callable(content):
                content(f)
            else:
                f.write(content.encode("utf-8") if isinstance(content, str) else content)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    if durable:
        fsync_dir(path.parent)


def replace_dir(staged: Path, final: Path, *, durable: bool = False) -> None:
    """Put the finished folder ``staged`` at ``final``, the folder-sized :func:`atomic_write`.

    An earlier ``final`` is renamed aside first and deleted after the swap, so ``final`` is at
    every moment absent, the old folder or the new one (never a mix). ``durable`` fsyncs the parent.
    """
    staged, final = Path(staged), Path(final)
    if final.exists():
        old = staging_sibling(final, "old")
        os.replace(final, old)
        os.replace(staged, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(staged, final)
    if durable:
        fsync_dir(final.parent)


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    return True


def is_stray(path: Path) -> bool:
    """True for a ``.part`` file no live process on this host is writing."""
    match = _OWNED.search(path.name)
    if match is None:
        return path.name.endswith(f".{PART}")  # the old fixed name: nobody can still own it safely
    if match["host"] != _host():
        return False
    return int(match["pid"]) != os.getpid() and not process_alive(int(match["pid"]))


def remove_stray_parts(folder: Path) -> int:
    """Delete the stray ``*.part`` files directly in ``folder``; returns how many were removed."""
    removed = 0
    for part in Path(folder).glob(f"*.{PART}"):
        if is_stray(part):
            part.unlink(missing_ok=True)
            removed += 1
    return removed
