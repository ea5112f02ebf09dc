"""Skip a pipeline stage when its inputs did not change.

Each stage directory holds ``.stage.json`` with a hash of everything the stage read (config
sections, input file sizes and mtimes, upstream fingerprints). A re-run compares hashes: equal
means the stage's outputs are still valid and it is skipped; different means it runs again.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterable

from xtts_ft.tempfiles import atomic_write

STAGE_FILE = ".stage.json"


def hash_inputs(*parts: Any) -> str:
    """Stable hash of JSON-able parts (dataclass dicts, lists of file stats, strings)."""
    blob = json.dumps(parts, sort_keys=True, default=str, ensure_ascii=False).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()


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


def is_current(stage_dir: Path, inputs_hash: str, outputs: Iterable[str]) -> bool:
    """True when the stage already ran with these inputs and its outputs are all still there."""
    record = stage_dir / STAGE_FILE
    if not record.is_file():
        return False
    try:
        saved = json.loads(record.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False
    return saved.get("inputs") == inputs_hash and all((stage_dir / o).exists() for o in outputs)


def mark_done(stage_dir: Path, inputs_hash: str, **info: Any) -> None:
    stage_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(stage_dir / STAGE_FILE, json.dumps({"inputs": inputs_hash, **info}, indent=2, default=str))
