"""Read a dataset folder into clip entries: LJSpeech, coqui CSV, or audio files with .txt transcripts.

Every line or file that names a clip becomes one :class:`SourceEntry`; entries the reader
cannot use carry their rejection (``bad_row``, ``outside_root``, ``missing_file``,
``unreadable`` transcript, ``duplicate_audio`` for a second entry naming the same file).
Nothing is skipped silently: only blank lines and a recognised header row are not clips.

Metadata files are read as UTF-8 (a BOM is ignored), with LF or CRLF line ends, a header row
or none, and extra columns ignored. Fields are split on ``|`` without CSV quoting (a quote is
an ordinary character, as in LJSpeech). Audio paths must stay inside the dataset root: an
entry that leaves it through ``..``, an absolute path or a symlink is rejected ``outside_root``.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Optional

from xtts_ft.config.schema import DATASET_FORMATS
from xtts_ft.data.commonvoice import default_files, is_commonvoice, read_commonvoice
from xtts_ft.data.entries import SourceEntry, bad_row, clip_entry, read_text_lines
from xtts_ft.errors import DataError
from xtts_ft.layout import EVAL_CSV, TRAIN_CSV

log = logging.getLogger(__name__)

AUDIO_EXTENSIONS = (".wav", ".flac", ".mp3", ".ogg")
FORMATS = tuple(f for f in DATASET_FORMATS if f not in ("auto", "hf"))  # the layouts read here; hf: data/hf_source.py
LJSPEECH_FILES = ("metadata.csv",)
COQUI_FILES = ("metadata.csv", TRAIN_CSV, EVAL_CSV)  # the names coqui gives them (and a prepared data/ folder)
# First-row values that mark a header line rather than a clip.
HEADER_NAMES = {"id", "file", "file_id", "filename", "name", "audio", "audio_file", "path", "wav", "utt", "utt_id"}
COQUI_COLUMNS = {
    "audio": ("audio_file", "audio", "path", "wav", "file", "filename"),
    "text": ("text", "transcript", "transcription", "sentence", "normalized_text"),
    "speaker": ("speaker_name", "speaker"),
}


def _is_audio_name(name: str) -> bool:
    return name.strip().lower().endswith(AUDIO_EXTENSIONS)


def read_ljspeech(root: Path, files: list[str], speaker: str) -> list[SourceEntry]:
    """``id|text[|normalized_text|...]`` rows; audio in ``wavs/<id>.wav`` (or .flac/.mp3/.ogg).

    The normalized_text column is used when present and non-empty (as coqui's own LJSpeech
    reader does), else the text column.
    """
    entries = []
    for name in files:
        for index, (n, line) in enumerate(read_text_lines(root / name)):
            fields = line.split("|")
            clip = fields[0].strip()
            if index == 0 and clip.lower() in HEADER_NAMES and _ljspeech_ref(root, clip) is None:
                continue  # a header row such as "id|text|normalized_text"
            if len(fields) < 2:
                entries.append(bad_row(name, n, f"{len(fields)} column(s); expected id|text[|normalized_text]", speaker))
                continue
            if not clip:
                entries.append(bad_row(name, n, "empty id column", speaker))
                continue
            text = fields[2] if len(fields) >= 3 and fields[2].strip() else fields[1]
            ref = _ljspeech_ref(root, clip) or (f"wavs/{clip}" if _is_audio_name(clip) else f"wavs/{clip}.wav")
            entries.append(clip_entry(root, ref, f"{name}:{n}", text, speaker))
    return entries


def _ljspeech_ref(root: Path, clip: str) -> Optional[str]:
    """The existing ``wavs/`` file for an LJSpeech id, or None."""
    if _is_audio_name(clip):
        return f"wavs/{clip}" if (root / "wavs" / clip).is_file() else None
    for ext in AUDIO_EXTENSIONS:
        if (root / "wavs" / f"{clip}{ext}").is_file():
            return f"wavs/{clip}{ext}"
    return None


def _coqui_columns(fields: list[str], path: Path) -> Optional[dict[str, int]]:
    """Column indices from a header row, or None when the row is data (positional columns)."""
    names = [f.strip().lower() for f in fields]
    is_header = "audio_file" in names or (not _is_audio_name(names[0]) and names[0] in HEADER_NAMES)
    if not is_header:
        return None
    columns = {}
    for key, aliases in COQUI_COLUMNS.items():
        found = next((names.index(a) for a in aliases if a in names), None)
        if found is not None:
            columns[key] = found
    if "audio" not in columns or "text" not in columns:
        raise DataError(
            f"{path}: header '{'|'.join(fields)}' lacks an audio_file or text column; "
            "a coqui CSV header is audio_file|text|speaker_name"
        )
    return columns


def read_coqui(root: Path, files: list[str], speaker: str) -> list[SourceEntry]:
    """``audio_file|text|speaker_name`` rows (header optional, columns by header name when present).

    Audio paths are relative to the dataset root (as coqui's own ``coqui`` formatter joins them);
    a missing or empty speaker column gives the configured speaker name.
    """
    entries = []
    for name in files:
        lines = read_text_lines(root / name)
        columns = {"audio": 0, "text": 1, "speaker": 2}
        if lines:
            header = _coqui_columns(lines[0][1].split("|"), root / name)
            if header is not None:
                columns, lines = header, lines[1:]
        needed = max(columns["audio"], columns["text"]) + 1
        for n, line in lines:
            fields = line.split("|")
            if len(fields) < needed:
                entries.append(bad_row(name, n, f"{len(fields)} column(s); expected audio_file|text|speaker_name", speaker))
                continue
            ref = fields[columns["audio"]].strip()
            if not ref:
                entries.append(bad_row(name, n, "empty audio_file column", speaker))
                continue
            spk_col = columns.get("speaker")
            spk = fields[spk_col].strip() if spk_col is not None and spk_col < len(fields) else ""
            entries.append(clip_entry(root, ref, f"{name}:{n}", fields[columns["text"]], spk or speaker))
    return entries


def read_folder(root: Path, speaker: str, exclude: Optional[Path] = None) -> list[SourceEntry]:
    """Audio files with a same-named ``.txt`` transcript next to them, in any sub-folder.

    Hidden folders (and ``exclude``, the output folder when it lies inside the root) are skipped.
    An audio file without a transcript, or a transcript without audio, is ``missing_file``.
    Folder links are followed inside the root; a folder link leading outside it is one
    ``outside_root`` entry (its files are not read), and a folder reached twice is read once.
    """
    entries = []
    seen = {root}
    for folder, dirs, names in os.walk(root, followlinks=True):
        here = Path(folder)
        keep = []
        for d in sorted(dirs, key=lambda d: ((here / d).is_symlink(), d)):  # real folders before links
            if d.startswith(".") or (exclude is not None and here / d == exclude):
                continue
            real = (here / d).resolve()
            rel = (here / d).relative_to(root).as_posix()
            if real != root and root not in real.parents:
                detail = f"folder link to '{real}', outside the dataset folder; its files were not read"
                entries.append(SourceEntry(rel + "/", rel + "/", "", speaker, rejection=("outside_root", detail)))
            elif real in seen:
                log.warning("folder %s leads to a folder already read (%s); not read twice", rel, real)
            else:
                seen.add(real)
                keep.append(d)
        dirs[:] = keep
        audio = sorted(n for n in names if _is_audio_name(n))
        texts = {n[:-4] for n in names if n.lower().endswith(".txt")}
        for name in audio:
            stem = name.rsplit(".", 1)[0]
            rel = (here / name).relative_to(root).as_posix()
            if stem not in texts:
                entries.append(SourceEntry(rel, rel, "", speaker, rejection=("missing_file", f"no transcript {stem}.txt")))
                continue
            text, problem = _read_transcript(root, here / f"{stem}.txt")
            entry = clip_entry(root, rel, rel, text, speaker)
            if entry.rejection is None and problem is not None:
                entry.audio, entry.rejection = None, problem
            entries.append(entry)
        stems = {n.rsplit(".", 1)[0] for n in audio}
        for stem in sorted(texts - stems):
            rel = (here / f"{stem}.txt").relative_to(root).as_posix()
            detail = f"transcript without an audio file ({'/'.join(AUDIO_EXTENSIONS)})"
            entries.append(SourceEntry(rel, rel, "", speaker, rejection=("missing_file", detail)))
    return entries


def _read_transcript(root: Path, path: Path) -> tuple[str, Optional[tuple[str, str]]]:
    rel = path.relative_to(root).as_posix()
    real = path.resolve()
    if real != root and root not in real.parents:
        return "", ("outside_root", f"transcript '{rel}' is a link outside the dataset folder")
    try:
        data = real.read_bytes()
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        utf16 = data.startswith((b"\xff\xfe", b"\xfe\xff"))  # Windows Notepad's "Unicode" is UTF-16
        return "", ("unreadable", f"transcript '{rel}' is {'UTF-16' if utf16 else 'not UTF-8'} text; save it as UTF-8 "
                                  f"text (a text encoding problem, the audio is not the issue)")
    except OSError as exc:
        return "", ("unreadable", f"transcript '{rel}': {exc.strerror or exc}")
    return " ".join(text.split()), None


def detect_format(root: Path, metadata_files: list[str]) -> str:
    """Tell the layout from the files present; DataError names what was looked for."""
    if not metadata_files and is_commonvoice(root):
        return "commonvoice"
    names = metadata_files or [n for n in COQUI_FILES if (root / n).is_file()]
    if any(n != "metadata.csv" for n in names) and not metadata_files:
        return "coqui"
    if names:
        lines = read_text_lines(root / names[0])
        if not lines:
            raise DataError(f"{root / names[0]}: the file is empty; add one line per clip")
        fields = [f.strip().lower() for f in lines[0][1].split("|")]
        return "coqui" if "audio_file" in fields or _is_audio_name(fields[0]) else "ljspeech"
    for _folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        stems = {n[:-4] for n in files if n.lower().endswith(".txt")}
        if any(_is_audio_name(n) and n.rsplit(".", 1)[0] in stems for n in files):
            return "folder"
    raise DataError(
        f"'{root}': cannot tell the dataset layout; looked for metadata.csv (LJSpeech id|text or coqui "
        f"audio_file|text|speaker_name), metadata_train.csv / metadata_eval.csv (coqui) and audio files "
        f"({', '.join(AUDIO_EXTENSIONS)}) with same-named .txt transcripts, and validated.tsv/train.tsv "
        f"with clips/ (Common Voice), and found none; fix the folder or pass --format"
    )


def read_entries(
    root: Path, fmt: str, speaker: str, metadata_files: list[str], exclude: Optional[Path] = None
) -> tuple[str, list[SourceEntry]]:
    """Read the dataset at ``root`` (resolved) in layout ``fmt`` ("auto" detects); return (layout, entries)."""
    if fmt == "auto":
        fmt = detect_format(root, metadata_files)
    if fmt not in FORMATS:
        raise DataError(f"dataset format '{fmt}' is unknown; use auto, {', '.join(FORMATS)}")
    if fmt == "folder":
        entries = read_folder(root, speaker, exclude)
    elif fmt == "commonvoice":
        files = list(metadata_files) or default_files(root)
        for name in files:
            if _escapes(root, name):
                raise DataError(f"dataset.metadata_files: '{name}' is outside '{root}'; name a file inside the "
                                f"dataset folder")
        entries = read_commonvoice(root, files, speaker)
    else:
        defaults = LJSPEECH_FILES if fmt == "ljspeech" else COQUI_FILES
        files = list(metadata_files) or [n for n in defaults if (root / n).is_file()]
        if not files:
            raise DataError(f"'{root}': no {' or '.join(defaults)} found for the {fmt} layout; add it or pass another --format")
        for name in files:
            if _escapes(root, name):
                raise DataError(f"dataset.metadata_files: '{name}' is outside '{root}'; name a file inside the dataset folder")
        reader = read_ljspeech if fmt == "ljspeech" else read_coqui
        entries = reader(root, files, speaker)
    if not entries:
        raise DataError(f"'{root}': the {fmt} layout was read but names no clips; check the metadata / transcripts")
    _mark_repeats(entries)
    log.info("read %d entries from %s (%s layout)", len(entries), root, fmt)
    return fmt, entries


def _escapes(root: Path, name: str) -> bool:
    real = (root / name).resolve()
    return root not in real.parents


def _mark_repeats(entries: list[SourceEntry]) -> None:
    """A second entry naming the same audio file is a duplicate_audio rejection."""
    first: dict[str, str] = {}
    for e in entries:
        if e.rejection is not None:
            continue
        if e.clip_id in first:
            e.audio, e.rejection = None, ("duplicate_audio", f"same file as {first[e.clip_id]}")
        else:
            first[e.clip_id] = e.where
