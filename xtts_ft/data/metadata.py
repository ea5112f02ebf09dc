"""The prepared dataset's metadata files: coqui format, ``audio_file|text|speaker_name``.

A run mixing datasets of several languages adds a fourth column, ``language`` (header
``audio_file|text|speaker_name|language``); a one-language dataset keeps the three columns.

``audio_file`` is relative to the folder holding the CSV (``wavs/<name>.wav``), so a
prepared folder can be moved as a whole. Files are UTF-8 without BOM, LF line ends, one
header row; the writer guarantees no field holds ``|`` or a line break.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from xtts_ft.errors import DataError
from xtts_ft.tempfiles import atomic_write

HEADER = "audio_file|text|speaker_name"
HEADER_WITH_LANGUAGE = HEADER + "|language"


def write_metadata(path: Path, rows: Sequence[tuple[str, ...]], *, with_language: bool = False) -> None:
    """Write (audio_file relative to path's folder, text, speaker_name[, language]) rows atomically."""
    lines = [HEADER_WITH_LANGUAGE if with_language else HEADER]
    for row in rows:
        if len(row) != (4 if with_language else 3):  # a bug in the caller, not user input
            raise ValueError(f"metadata row {row!r} has {len(row)} fields")
        for value in row:
            if "|" in value or "\n" in value or "\r" in value:  # upstream checks make this impossible
                raise ValueError(f"metadata field {value!r} holds '|' or a line break")
        lines.append("|".join(row))
    atomic_write(path, "\n".join(lines) + "\n")


def read_metadata(csv_path: Path) -> list[dict[str, str]]:
    """Rows of a metadata_*.csv written by ``prepare_dataset``, with absolute audio paths.

    Returns dicts ``{"audio_file": str (absolute), "text": str, "speaker_name": str}`` in file
    order, plus ``"language"`` when the file has that column. Raises DataError naming the file
    (and line) when it is missing, malformed, or names an audio file that does not exist.
    """
    csv_path = Path(csv_path)
    if not csv_path.is_file():
        raise DataError(f"{csv_path}: metadata file not found; run 'python -m xtts_ft prepare' first")
    try:
        lines = csv_path.read_text(encoding="utf-8-sig").split("\n")
    except UnicodeDecodeError:
        raise DataError(f"{csv_path}: not UTF-8 text; prepare the dataset again") from None
    lines = [line.rstrip("\r") for line in lines]
    if not lines or lines[0] not in (HEADER, HEADER_WITH_LANGUAGE):
        raise DataError(f"{csv_path}: first line must be '{HEADER}'; prepare the dataset again")
    columns = lines[0].split("|")
    base = csv_path.parent.resolve()
    rows = []
    for n, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        fields = line.split("|")
        if len(fields) != len(columns) or not fields[0] or not fields[1]:
            raise DataError(f"{csv_path}: line {n} is not {lines[0]}; prepare the dataset again")
        audio = base / fields[0]
        if not audio.is_file():
            raise DataError(f"{csv_path}: line {n}: audio '{fields[0]}' is missing; prepare the dataset again")
        rows.append({**dict(zip(columns, fields)), "audio_file": str(audio)})
    return rows
