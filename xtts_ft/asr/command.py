"""``python -m xtts_ft transcribe``: one ``path<TAB>text`` line per audio file."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import soundfile as sf

from xtts_ft.asr.recognizer import MIN_AUDIO_S, Recognizer
from xtts_ft.config import Config
from xtts_ft.data.readers import AUDIO_EXTENSIONS
from xtts_ft.errors import DataError


def audio_files(given: Sequence[str]) -> list[str]:
    """The files named, a folder standing for the audio files directly in it (sorted by name)."""
    files, missing = [], []
    for item in given:
        path = Path(item)
        if path.is_dir():
            found = sorted(str(p) for p in path.iterdir() if p.is_file() and p.suffix.lower() in AUDIO_EXTENSIONS)
            if not found:
                raise DataError(f"{item}: a folder with no audio files ({', '.join(AUDIO_EXTENSIONS)}) directly in it; "
                                f"give audio files, or a folder that holds them")
            files += found
        elif path.is_file():
            files.append(item)
        else:
            missing.append(item)
    if missing:
        raise DataError(f"audio file(s) not found: {', '.join(missing)}")
    return files


def refuse_too_short(path: str) -> None:
    """One line for a file whose header says it is shorter than the recogniser can hear (read fully later)."""
    try:
        info = sf.info(path)
    except (sf.LibsndfileError, RuntimeError):
        return  # not a format soundfile reads: the decoder (ffmpeg) decides later
    seconds = info.frames / info.samplerate if info.samplerate > 0 else 0.0
    if seconds < MIN_AUDIO_S:
        what = "no audio in it" if info.frames == 0 else f"only {seconds * 1000:.0f} ms of audio"
        raise DataError(f"{path}: {what}; the recogniser needs at least {MIN_AUDIO_S:g} s of speech")


def transcribe_command(cfg: Config, audio: Sequence[str], model: Optional[str] = None) -> int:
    audio = audio_files(audio)
    for path in audio:  # before the recogniser loads: a clip too short to hear fails at once
        refuse_too_short(path)
    recognizer = Recognizer.from_config(cfg.asr, model)
    for path, text in zip(audio, recognizer.transcribe_files(audio, refuse_short=True)):
        print(f"{path}\t{text}", flush=True)
    return 0
