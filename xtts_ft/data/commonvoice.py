"""Read a Common Voice folder: ``validated.tsv`` (or ``train.tsv``) naming clips in ``clips/``.

Common Voice releases are tab-separated with a header row (``client_id path sentence up_votes
...``), no quoting (a quote is part of the sentence), audio as MP3 in ``clips/``. Each row becomes
one :class:`SourceEntry`; rows without a path or with too few columns are ``bad_row``, a clip not
in ``clips/`` is ``missing_file``. The speaker is the contributor: ``client_id`` is a 64-128
character hash, so it is shortened to ``cv_`` + its first 10 characters (stable across releases,
distinct in practice); a row with no client_id gets the configured speaker name.
"""

from __future__ import annotations

from pathlib import Path

from xtts_ft.data.entries import SourceEntry, bad_row, clip_entry, read_text_lines
from xtts_ft.errors import DataError

TSV_FILES = ("validated.tsv", "train.tsv")  # validated.tsv holds every validated clip (train/dev/test included)
CLIPS_DIR = "clips"
SPEAKER_PREFIX = "cv_"
SPEAKER_CHARS = 10


def is_commonvoice(root: Path) -> bool:
    return (root / CLIPS_DIR).is_dir() and any((root / n).is_file() for n in TSV_FILES)


def default_files(root: Path) -> list[str]:
    """validated.tsv when present, else train.tsv (never both: train.tsv is a subset of validated.tsv)."""
    for name in TSV_FILES:
        if (root / name).is_file():
            return [name]
    raise DataError(f"'{root}': no {' or '.join(TSV_FILES)} found for the commonvoice layout; add it or pass "
                    f"another format")


def speaker_of(client_id: str, fallback: str) -> str:
    client_id = client_id.strip()
    return SPEAKER_PREFIX + client_id[:SPEAKER_CHARS] if client_id else fallback


def read_commonvoice(root: Path, files: list[str], speaker: str) -> list[SourceEntry]:
    """One entry per data row of each TSV; columns found by the header's names."""
    entries = []
    for name in files:
        lines = read_text_lines(root / name)
        if not lines:
            raise DataError(f"{root / name}: the file is empty; a Common Voice TSV starts with a header row")
        header = [h.strip().lower() for h in lines[0][1].split("\t")]
        missing = [c for c in ("path", "sentence") if c not in header]
        if missing:
            raise DataError(f"{root / name}: header lacks {', '.join(missing)}; a Common Voice TSV has "
                            f"client_id, path and sentence columns (tab-separated)")
        col_path, col_text = header.index("path"), header.index("sentence")
        col_client = header.index("client_id") if "client_id" in header else None
        needed = max(col_path, col_text) + 1
        for n, line in lines[1:]:
            fields = line.split("\t")
            if len(fields) < needed:
                entries.append(bad_row(name, n, f"{len(fields)} column(s); the header has {len(header)}", speaker))
                continue
            ref = fields[col_path].strip()
            if not ref:
                entries.append(bad_row(name, n, "empty path column", speaker))
                continue
            client = fields[col_client] if col_client is not None and col_client < len(fields) else ""
            spk = speaker_of(client, speaker)
            entries.append(clip_entry(root, f"{CLIPS_DIR}/{ref}", f"{name}:{n}", fields[col_text], spk))
    return entries
