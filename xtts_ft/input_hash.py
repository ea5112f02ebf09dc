"""Hashes of what a step read, defined once: the pipeline's stage records and the run folder's fingerprint.

Two records compare inputs across commands: each pipeline stage's ``.stage.json`` (a hash of the
config sections and the sizes and mtimes of the files it read, :mod:`xtts_ft.stages`) and
``run.json``'s fingerprint of what defines a run (transcripts by content, audio by size,
:mod:`xtts_ft.run_folder`). Both are built from the functions here, so the digests mean the same
everywhere; the values they record are unchanged from before the two shared this module, so
older ``.stage.json`` and ``run.json`` files still compare equal.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Iterable, Optional

_CHUNK = 1 << 20


def digest(data: bytes, length: Optional[int] = None) -> str:
    """sha256 of ``data`` in hex, cut to ``length`` digits (None: all 64)."""
    text = hashlib.sha256(data).hexdigest()
    return text if length is None else text[:length]


def file_digest(path: Path, length: Optional[int] = 16) -> str:
    """``digest`` of a file's content, read in 1 MiB chunks (16 digits: a transcript's fingerprint)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    text = h.hexdigest()
    return text if length is None else text[:length]


def hash_inputs(*parts: object) -> str:
    """``digest`` of JSON-able parts (dataclass dicts, lists of file stats, strings), keys sorted."""
    return digest(json.dumps(parts, sort_keys=True, default=str, ensure_ascii=False).encode("utf-8"))


def file_stats(paths: Iterable[Path]) -> list[tuple[str, int, int]]:
    """(path, size, mtime_ns) per file: cheap change detection without reading contents."""
    out = []
    for p in sorted(Path(x) for x in paths):
        st = p.stat()
        out.append((str(p), st.st_size, st.st_mtime_ns))
    return out


def tree_stats(root: Path) -> list[tuple[str, int, int]]:
    """file_stats of every file under ``root`` (hidden files included, folders excluded)."""
    files = [Path(dirpath) / name for dirpath, _, names in os.walk(root) for name in names]
    return file_stats(files)
