"""``python -m xtts_ft transcribe``: one ``path<TAB>text`` line per audio file."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

from xtts_ft.config import Config
from xtts_ft.errors import DataError


def transcribe_command(cfg: Config, audio: Sequence[str], model: Optional[str] = None) -> int:
    from xtts_ft.asr.recognizer import Recognizer

    missing = [a for a in audio if not Path(a).is_file()]
    if missing:
        raise DataError(f"audio file(s) not found: {', '.join(missing)}")
    recognizer = Recognizer.from_config(cfg.asr, model)
    for path, text in zip(audio, recognizer.transcribe_files(audio)):
        print(f"{path}\t{text}", flush=True)
    return 0
