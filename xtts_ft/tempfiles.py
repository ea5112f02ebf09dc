"""Temporary sibling files for atomic writes, named per process so processes never share one.

A file is written to ``<name>.<host>-<pid>.part`` beside its final path and renamed into place.
With a fixed name (``<name>.part``) two processes writing the same output (two ranks of a
``torchrun`` launch, two runs pointed at one folder) rename each other's half-written files or
find theirs gone. Clean-up of leftovers (:func:`remove_stray_parts`) deletes only files whose
writer is dead: a process on this host that no longer exists, or an old-style name without an
owner. Files of live processes, and of other hosts (whose pids mean nothing here), are left alone.
"""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

PART = "part"
_OWNED = re.compile(r"\.(?P<host>[A-Za-z0-9_-]+)-(?P<pid>\d+)\.part$")


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname())[:40] or "host"


def temp_sibling(path: Path) -> Path:
    """``path``'s temporary twin for this process: ``<name>.<host>-<pid>.part`` in the same folder."""
    path = Path(path)
    return path.with_name(f"{path.name}.{_host()}-{os.getpid()}.{PART}")


def _alive(pid: int) -> bool:
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
    return int(match["pid"]) != os.getpid() and not _alive(int(match["pid"]))


def remove_stray_parts(folder: Path) -> int:
    """Delete the stray ``*.part`` files directly in ``folder``; returns how many were removed."""
    removed = 0
    for part in Path(folder).glob(f"*.{PART}"):
        if is_stray(part):
            part.unlink(missing_ok=True)
            removed += 1
    return removed
