"""Named voices: reference clips a request picks by name, and their conditioning latents, cached.

Where voices come from, in this order (a later source never replaces an earlier name):

* the run's own speakers: the longest clip of each speaker in the run's prepared eval set (train
  set when there is none), named after the speaker (the clip evaluation picks by default);
* ``--voices DIR``: every audio file in the folder, named after its file stem;
* uploads (:meth:`VoiceLibrary.add`): written into the voices folder (or a folder of the
  library's own), never over an existing file.

A name is only ever looked up in the table built above, never joined to a path, so no name
(``../x``, ``/etc/passwd``) can reach a file outside those sources; names given to new voices must
match :data:`VOICE_NAME` as well. Conditioning latents cost a pass of the speaker encoder and the
GPT's conditioning encoder per clip; they are cached per clip *content* (sha256), so renaming or
re-uploading the same clip costs nothing and a changed file is never served stale latents.
"""

from __future__ import annotations

import hashlib
import logging
import re
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import soundfile as sf

from xtts_ft.data import read_metadata
from xtts_ft.errors import DataError, UserError
from xtts_ft.evaluate.synthesis import check_reference
from xtts_ft.layout import RunLayout
from xtts_ft.tempfiles import atomic_write

log = logging.getLogger(__name__)

VOICE_NAME = re.compile(r"^[\w\u1200-\u139F\u2D80-\u2DDF\uAB00-\uAB2F][\w\u1200-\u139F\u2D80-\u2DDF\uAB00-\uAB2F.-]{0,63}$")
AUDIO_SUFFIXES = (".wav", ".flac", ".mp3", ".ogg", ".opus")
DEFAULT_VOICE = "default"  # an alias of the first voice, for apps that always send some name


class VoiceError(UserError):
    """A voice name that is unknown or not allowed, or an upload that is not a usable clip."""


@dataclass(frozen=True)
class Voice:
    name: str
    path: Path
    source: str  # "run", "folder" or "upload"

    def to_json(self) -> dict:
        return {"name": self.name, "source": self.source, "file": self.path.name}


def run_speaker_clips(run_dir: Path, language: Optional[str]) -> dict[str, Path]:
    """Speaker name -> their longest clip in the run's prepared eval set (else train set); {} when unreadable."""
    layout = RunLayout(run_dir)
    for csv in (layout.eval_csv, layout.train_csv):
        if not csv.is_file():
            continue
        try:
            rows = [r for r in read_metadata(csv) if language is None or r.get("language", language) == language]
        except DataError as exc:
            log.warning("voices: the run's speakers are not offered (%s)", exc)
            return {}
        longest: dict[str, tuple[float, Path]] = {}
        for row in rows:
            seconds = sf.info(row["audio_file"]).duration
            if seconds > longest.get(row["speaker_name"], (-1.0, Path()))[0]:
                longest[row["speaker_name"]] = (seconds, Path(row["audio_file"]))
        if longest:
            return {name: longest[name][1] for name in sorted(longest)}
    return {}


def check_voice_name(name: str) -> str:
    if not isinstance(name, str) or not VOICE_NAME.match(name) or ".." in name:
        raise VoiceError(
            f"voice name {name!r}: use 1-64 letters, digits, '_', '-' or '.' (no path, no '..', not starting with '.')"
        )
    return name


class VoiceLibrary:
    """The voices a server offers, and the cache of their conditioning latents."""

    def __init__(self, *, run_clips: Optional[dict[str, Path]] = None, folder: Optional[Path] = None) -> None:
        self._lock = threading.Lock()
        self._voices: dict[str, Voice] = {}
        self._latents: dict[str, tuple] = {}  # sha256 of the clip's bytes -> (gpt_cond_latent, speaker_embedding)
        self.folder = Path(folder) if folder is not None else None
        self._own_folder: Optional[tempfile.TemporaryDirectory] = None
        for name, path in (run_clips or {}).items():
            if VOICE_NAME.match(name):
                self._voices[name] = Voice(name, Path(path), "run")
            else:
                log.warning("voices: speaker %r of the run is not offered (not a usable voice name)", name)
        if self.folder is not None:
            if not self.folder.is_dir():
                raise VoiceError(f"--voices {self.folder}: not a folder; pass a folder of reference clips (WAV/FLAC)")
            for path in sorted(self.folder.iterdir()):
                if path.suffix.lower() in AUDIO_SUFFIXES and path.is_file() and VOICE_NAME.match(path.stem):
                    self._voices.setdefault(path.stem, Voice(path.stem, path, "folder"))

    def names(self) -> list[str]:
        with self._lock:
            return list(self._voices)

    def list(self) -> list[Voice]:
        with self._lock:
            return list(self._voices.values())

    def get(self, name: str) -> Voice:
        with self._lock:
            if name == DEFAULT_VOICE and name not in self._voices and self._voices:
                return next(iter(self._voices.values()))
            voice = self._voices.get(name) if isinstance(name, str) else None
            if voice is None:
                known = ", ".join(self._voices) or "none yet: start with --voices DIR or upload one"
                raise VoiceError(f"voice {name!r}: unknown; available voices: {known}")
            return voice

    def _upload_folder(self) -> Path:
        if self.folder is not None:
            return self.folder
        if self._own_folder is None:  # no --voices: uploads live as long as the server
            self._own_folder = tempfile.TemporaryDirectory(prefix="xtts_ft_voices_")
        return Path(self._own_folder.name)

    def add(self, name: str, data: bytes, suffix: str = ".wav") -> Voice:
        """A new voice from an uploaded clip; the clip must decode and be long enough (a ``VoiceError`` otherwise)."""
        check_voice_name(name)
        suffix = suffix.lower() if suffix.lower() in AUDIO_SUFFIXES else ".wav"
        with self._lock:
            if name in self._voices:
                raise VoiceError(f"voice {name!r}: exists already; choose another name")
            path = self._upload_folder() / f"{name}{suffix}"
            if path.exists():
                raise VoiceError(f"voice {name!r}: {path} exists already; choose another name")
            atomic_write(path, data)
            try:
                check_reference(path)
            except DataError as exc:
                path.unlink()
                raise VoiceError(f"uploaded clip for voice {name!r}: {str(exc).split(': ', 1)[-1]}") from None
            voice = Voice(name, path, "upload")
            self._voices[name] = voice
        log.info("voices: added %r from an upload (%d bytes)", name, len(data))
        return voice

    def latents(self, voice: Voice, compute) -> tuple:
        """``compute(path)`` once per clip content; later calls (any name, same bytes) reuse the result."""
        digest = hashlib.sha256(voice.path.read_bytes()).hexdigest()
        with self._lock:
            hit = self._latents.get(digest)
        if hit is not None:
            return hit
        value = compute(voice.path)
        with self._lock:
            self._latents[digest] = value
        return value

    def cached_clips(self) -> int:
        with self._lock:
            return len(self._latents)
