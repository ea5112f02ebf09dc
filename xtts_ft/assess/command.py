"""``python -m xtts_ft assess --config FILE [--texts TSV] AUDIO...``: one TSV row per audio file.

Columns: ``path``, ``mos`` (DNSMOS's predicted overall quality, 1-5), ``snr_db`` (the SNR estimate),
``tail_s`` (seconds of speech after the text's last word) and ``cer`` (what asr.model hears against the
text), and ``error``. ``tail_s`` and ``cer`` need the file's text: ``--texts`` names a file of
``path<TAB>text`` lines, as ``python -m xtts_ft transcribe`` prints them (its path as given on the command
line, or the same file by another path); the recogniser is loaded only then. A file that cannot be read
gets a row with its error and empty scores, never a traceback; the command exits 1 when any row failed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional, Sequence, TextIO

from xtts_ft.asr.command import audio_files
from xtts_ft.asr.recognizer import Recognizer
from xtts_ft.assess.listener import Heard, Listener, UnreadableAudio
from xtts_ft.config import Config
from xtts_ft.errors import DataError

COLUMNS = ("path", "mos", "snr_db", "tail_s", "cer", "error")


def read_texts(path: Path) -> dict[str, str]:
    """``path<TAB>text`` lines (blank lines skipped), by the path as written and by the resolved path."""
    texts: dict[str, str] = {}
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"--texts {path}: cannot read it ({exc}); give a UTF-8 file of path<TAB>text lines") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        audio, tab, text = line.partition("\t")
        if not tab or not audio.strip():
            raise DataError(f"--texts {path} line {number}: not path<TAB>text; write each file's path, a tab, "
                            f"then its text (as python -m xtts_ft transcribe prints)")
        texts[audio.strip()] = text.strip()
        texts[str(Path(audio.strip()).resolve())] = text.strip()
    return texts


def _files(given: Sequence[str]) -> list[str]:
    """The files named (a folder: the audio files directly in it); a missing one stays, to get an error row."""
    out: list[str] = []
    for item in given:
        out.extend(audio_files([item]) if Path(item).is_dir() else [item])
    return out


def _number(value: Optional[float], digits: int) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def row(path: str, heard: Optional[Heard], error: str = "") -> str:
    """One TSV line (tabs and line breaks in the error message become spaces)."""
    if heard is None:
        cells = [path, "", "", "", "", " ".join(error.split())]
    else:
        cells = [path, _number(heard.mos, 3), _number(heard.snr_db, 1), _number(heard.tail_s, 3),
                 _number(heard.cer, 4), ""]
    return "\t".join(cells)


def assess_command(cfg: Config, audio: Sequence[str], texts_file: Optional[Path] = None,
                   out: Optional[TextIO] = None) -> int:
    """Print the header and a row per file (to ``out``, default stdout); 0 when every file was scored, 1 when any
    row holds an error."""
    out = out or sys.stdout
    texts = read_texts(texts_file) if texts_file is not None else {}
    files = _files(audio)
    recognizer = Recognizer.from_config(cfg.asr) if texts else None
    listener = Listener(recognizer, cfg.ingest.window_s)
    failed = 0
    print("\t".join(COLUMNS), file=out, flush=True)
    for path in files:
        text = texts.get(path) or texts.get(str(Path(path).resolve()))
        heard, error = None, "file not found"
        if Path(path).is_file():
            try:
                heard = listener.listen_file(Path(path), text)
            except UnreadableAudio as exc:
                error = str(exc)
        failed += heard is None
        print(row(path, heard, error), file=out, flush=True)
    return 1 if failed else 0
