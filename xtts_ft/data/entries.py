"""A clip as a dataset names it, and the helpers every layout's reader shares.

:mod:`xtts_ft.data.readers` (LJSpeech, coqui CSV, folder) and :mod:`xtts_ft.data.commonvoice`
both build :class:`SourceEntry` values with these; neither reader imports the other's internals.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from xtts_ft.errors import DataError


@dataclass
class SourceEntry:
    """One clip as the dataset names it, before any audio is read."""

    clip_id: str  # audio path relative to the root (posix), or "<file>:<line>" for a bad row
    where: str  # where the user can find it: "metadata.csv:12" or "a/b.txt"
    text: str
    speaker: str
    audio: Optional[Path] = None  # resolved file inside the root; None when rejected
    rejection: Optional[tuple[str, str]] = None  # (reason, detail)


def resolve_inside(root: Path, ref: str) -> tuple[str, Optional[Path], Optional[tuple[str, str]]]:
    """Resolve ``ref`` against ``root`` (already resolved); return (clip_id, file, rejection)."""
    ref = ref.strip().replace("\\", "/")
    given = Path(ref)
    logical = Path(os.path.normpath(given if given.is_absolute() else root / given))
    if logical != root and root not in logical.parents:
        return ref, None, ("outside_root", f"'{ref}' points outside the dataset folder")
    clip_id = logical.relative_to(root).as_posix()
    real = logical.resolve()
    if real != root and root not in real.parents:
        return clip_id, None, ("outside_root", f"'{ref}' is a link to '{real}', outside the dataset folder")
    if not real.is_file():
        return clip_id, None, ("missing_file", f"audio file '{ref}' not found")
    return clip_id, real, None


def read_text_lines(path: Path) -> list[tuple[int, str]]:
    """Non-blank lines of a UTF-8 file (BOM and CR stripped) with their 1-based line numbers."""
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise DataError(f"{path}: line {line} is not UTF-8 text; save the file as UTF-8") from None
    lines = [(i + 1, line.rstrip("\r")) for i, line in enumerate(text.split("\n"))]
    return [(n, line) for n, line in lines if line.strip()]


def bad_row(name: str, n: int, detail: str, speaker: str) -> SourceEntry:
    where = f"{name}:{n}"
    return SourceEntry(clip_id=where, where=where, text="", speaker=speaker, rejection=("bad_row", detail))


def clip_entry(root: Path, ref: str, where: str, text: str, speaker: str) -> SourceEntry:
    clip_id, audio, rejection = resolve_inside(root, ref)
    return SourceEntry(clip_id=clip_id, where=where, text=text.strip(), speaker=speaker, audio=audio, rejection=rejection)
