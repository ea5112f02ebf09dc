"""Named voices: reference clips a request picks by name, and their conditioning latents, cached.

Where voices come from, in this order (a later source never replaces an earlier name):

* the run's own speakers: the longest clip of each speaker in the run's prepared eval set (train
  set when there is none), named after the speaker (the clip evaluation picks by default);
* ``--voices DIR``: every audio file in the folder, named after its file stem. The folder is
  checked at start: a file that is not a usable clip (another kind of file, a name outside
  :data:`VOICE_NAME`, audio that does not decode, is too short or silent) is skipped with one
  log line naming it and why, and counted in :attr:`VoiceLibrary.skipped`;
* uploads (:meth:`VoiceLibrary.add`): checked the same way, then written into the voices folder
  (or, without ``--voices``, a temporary folder of the library's own that is deleted when the
  server stops: :attr:`VoiceLibrary.uploads_kept` says which), never over an existing file.

A name is only ever looked up in the table built above, never joined to a path, so no name
(``../x``, ``/etc/passwd``) can reach a file outside those sources; names given to new voices must
match :data:`VOICE_NAME` as well. Conditioning latents cost a pass of the speaker encoder and the
GPT's conditioning encoder per clip; they are cached per clip *content* (sha256), so renaming or
re-uploading the same clip costs nothing and a changed file is never served stale latents.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

import soundfile as sf

from xtts_ft.audio_io import DecodeError, load_audio
from xtts_ft.config import DatasetConfig
from xtts_ft.data import read_metadata
from xtts_ft.errors import DataError, UserError
from xtts_ft.inference.conditioning import check_reference
from xtts_ft.layout import RunLayout
from xtts_ft.tempfiles import atomic_write

if TYPE_CHECKING:
    from xtts_ft.inference.conditioning import Latents

log = logging.getLogger(__name__)

VOICE_NAME = re.compile(r"^[\w\u1200-\u139F\u2D80-\u2DDF\uAB00-\uAB2F][\w\u1200-\u139F\u2D80-\u2DDF\uAB00-\uAB2F.-]{0,63}$")
AUDIO_SUFFIXES = (".wav", ".flac", ".mp3", ".ogg", ".opus")
DEFAULT_VOICE = "default"  # an alias of the first voice, for apps that always send some name
SILENT_PEAK_DB = DatasetConfig.silence_peak_db  # a clip whose peak is below this is silent (as prepare judges it)


class VoiceError(UserError):
    """A voice name that is unknown or not allowed, or an upload that is not a usable clip."""


@dataclass(frozen=True)
class Voice:
    name: str
    path: Path
    source: str  # "run", "folder" or "upload"

    def to_json(self) -> dict[str, str]:
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


def check_voice_clip(path: Path, shown_as: str) -> None:
    """A clip a voice can be made from: it decodes as the engine reads it, is long enough and is not silent.

    A ``VoiceError`` otherwise, naming the clip as ``shown_as`` (the user's own file name: an upload's
    temporary path means nothing to them) and saying what is wrong.
    """
    try:
        check_reference(path)
        audio, _ = load_audio(path)
    except (DataError, DecodeError) as exc:
        why = str(exc).replace(f"speaker wav '{path}': ", "").replace(str(path), shown_as)
        raise VoiceError(f"{shown_as}: {why}") from None
    peak = float(abs(audio).max()) if audio.size else 0.0
    if peak <= 10.0 ** (SILENT_PEAK_DB / 20.0):
        level = f"{20.0 * math.log10(peak):.0f} dBFS" if peak > 0 else "digital silence"
        raise VoiceError(f"{shown_as}: silent (peak {level}, below {SILENT_PEAK_DB:g} dBFS); give a 3-10 s "
                         f"recording of the voice speaking")


class VoiceLibrary:
    """The voices a server offers, and the cache of their conditioning latents."""

    def __init__(self, *, run_clips: Optional[dict[str, Path]] = None, folder: Optional[Path] = None) -> None:
        self._lock = threading.Lock()
        self._voices: dict[str, Voice] = {}
        self._latents: dict[str, Latents] = {}  # sha256 of the clip's bytes -> (gpt_cond_latent, speaker_embedding)
        self._digests: dict[Path, tuple[tuple[int, int, int], str]] = {}  # clip -> (its file's stat, its sha256)
        self.folder = Path(folder) if folder is not None else None
        self._own_folder: Optional[tempfile.TemporaryDirectory[str]] = None
        self.skipped: list[str] = []  # one line per file of the voices folder that is not offered
        for name, path in (run_clips or {}).items():
            if VOICE_NAME.match(name):
                self._voices[name] = Voice(name, Path(path), "run")
            else:
                log.warning("voices: speaker %r of the run is not offered (not a usable voice name)", name)
        if self.folder is not None:
            if not self.folder.is_dir():
                raise VoiceError(f"--voices {self.folder}: not a folder; pass a folder of reference clips (WAV/FLAC)")
            for path in sorted(self.folder.iterdir()):
                why = self._unusable(path)
                if why:
                    self.skipped.append(f"{path.name}: {why}")
                    log.warning("voices: %s skipped: %s", path, why)
                else:
                    self._voices[path.stem] = Voice(path.stem, path, "folder")

    def _unusable(self, path: Path) -> Optional[str]:
        """Why a file of the voices folder is not offered as a voice; None when it is."""
        if not path.is_file():
            return "not a file"
        if path.suffix.lower() not in AUDIO_SUFFIXES:
            return f"not an audio file (a voice is a {'/'.join(s[1:] for s in AUDIO_SUFFIXES)} clip)"
        if not VOICE_NAME.match(path.stem) or ".." in path.stem:
            return (f"{path.stem!r} is not a usable voice name (1-64 letters, digits, '_', '-' or '.', not starting "
                    f"with '.'); rename the file")
        if path.stem in self._voices:
            return f"the voice {path.stem!r} exists already (a {self._voices[path.stem].source} voice); rename the file"
        try:
            check_voice_clip(path, path.name)
        except VoiceError as exc:
            return str(exc).split(": ", 1)[-1]
        return None

    @property
    def uploads_kept(self) -> bool:
        """True when uploaded voices outlive the server (they go to ``--voices DIR``)."""
        return self.folder is not None

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

    def add(self, name: str, data: bytes, suffix: str = ".wav", *, filename: Optional[str] = None) -> Voice:
        """A new voice from an uploaded clip (``filename``: the user's name for it, for messages); the clip must
        pass :func:`check_voice_clip` (a ``VoiceError`` otherwise)."""
        check_voice_name(name)
        suffix = suffix.lower() if suffix.lower() in AUDIO_SUFFIXES else ".wav"
        shown = f"uploaded clip {filename!r} for voice {name!r}" if filename else f"uploaded clip for voice {name!r}"
        with self._lock:
            if name in self._voices:
                raise VoiceError(f"voice {name!r}: exists already; choose another name")
            path = self._upload_folder() / f"{name}{suffix}"
            if path.exists():
                raise VoiceError(f"voice {name!r}: {path} exists already; choose another name")
            atomic_write(path, data)
            try:
                check_voice_clip(path, shown)
            except VoiceError:
                path.unlink()
                raise
            voice = Voice(name, path, "upload")
            self._voices[name] = voice
        kept = f"saved as {path}" if self.uploads_kept else "kept until the server stops (no --voices folder)"
        log.info("voices: added %r from an upload (%d bytes), %s", name, len(data), kept)
        return voice

    def latents(self, voice: Voice, compute: Callable[[Path], Latents]) -> Latents:
        """``compute(path)`` once per clip content; later calls (any name, same bytes) reuse the result."""
        digest = self._digest(voice.path)
        with self._lock:
            hit = self._latents.get(digest)
        if hit is not None:
            return hit
        value = compute(voice.path)
        with self._lock:
            self._latents[digest] = value
        return value

    def _digest(self, path: Path) -> str:
        """The sha256 of the clip's bytes, read and hashed again only when its file changed (size, modification time
        or inode): every piece a caller asks for looks its voice up, and reading and hashing a clip each time was
        host work per piece (a 2 s clip: about 0.4 ms; a 30 s one several)."""
        st = path.stat()
        stamp = (st.st_size, st.st_mtime_ns, st.st_ino)
        with self._lock:
            known = self._digests.get(path)
        if known is not None and known[0] == stamp:
            return known[1]
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        with self._lock:
            self._digests[path] = (stamp, digest)
        return digest

    def cached_clips(self) -> int:
        with self._lock:
            return len(self._latents)
