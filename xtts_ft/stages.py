"""Skip a pipeline stage when its inputs did not change.

Each stage directory holds ``.stage.json`` with a hash of everything the stage read (config
sections, input file sizes and mtimes, upstream fingerprints). A re-run compares hashes: equal
means the stage's outputs are still valid and it is skipped; different means it runs again.
The hashes and file stats are :mod:`xtts_ft.input_hash`'s, shared with the run folder's fingerprint.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

from xtts_ft.input_hash import file_stats, hash_inputs, tree_stats
from xtts_ft.tempfiles import atomic_write

__all__ = ["STAGE_FILE", "file_stats", "hash_inputs", "is_current", "mark_done", "tree_stats"]

STAGE_FILE = ".stage.json"


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


def mark_done(stage_dir: Path, inputs_hash: str, **info: object) -> None:
    stage_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(stage_dir / STAGE_FILE, json.dumps({"inputs": inputs_hash, **info}, indent=2, default=str))
