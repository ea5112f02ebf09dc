"""Reading audio, and the sample rates the project works at: defined once.

Every stage that loads an audio file goes through :func:`decode` (the samples as the file holds
them) or :func:`load_audio` (mono float32, resampled to the rate asked for): soundfile
(libsndfile: WAV, FLAC, OGG, and MP3 from libsndfile 1.1 on), and when soundfile cannot decode
a file and the ``ffmpeg`` binary is on PATH, ffmpeg into a temporary float WAV. Resampling is
soxr's HQ filter (:func:`resample`). A foundation module: it imports numpy, soundfile and soxr
only, so the data stage's worker processes can use it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import numpy as np
import numpy.typing as npt
import soundfile as sf
import soxr

log = logging.getLogger(__name__)

#: XTTS-v2's input rate: prepared clips, the DVAE's codes, voice conditioning, MCD.
DATASET_RATE = 22050
#: XTTS-v2's HiFiGAN output rate: every synthesised sample and served stream.
OUTPUT_RATE = 24000
#: What the speech recognisers and silero-vad read.
RECOGNIZER_RATE = 16000
RESAMPLE_QUALITY = "HQ"
FULL_SCALE = 0.999  # a sample at or above this magnitude counts as clipped
# 8-bit files cannot reach 0.999 on the positive side (their largest value is 127/128).
FULL_SCALE_8BIT = 127.0 / 128.0


class DecodeError(Exception):
    """The file could not be decoded by soundfile or ffmpeg (becomes an 'unreadable' rejection)."""


class TooLongToDecode(Exception):
    """The file is longer than the decode limit; it is not read into memory (a 'too_long' rejection)."""


def decode(path: str, limit_s: float = float("inf")) -> tuple[npt.NDArray[np.float32], int, float]:
    """float32 samples (frames, channels), the sample rate, and the clipping threshold for the format.

    Longer than limit_s: TooLongToDecode; not decodable by soundfile nor ffmpeg: DecodeError.
    """
    try:
        with _quiet_decoder(path), sf.SoundFile(path) as f:
            if f.samplerate > 0 and f.frames / f.samplerate > limit_s:
                raise TooLongToDecode(f"{f.frames / f.samplerate:.0f} s long")
            full_scale = FULL_SCALE_8BIT if f.subtype in ("PCM_U8", "PCM_S8") else FULL_SCALE
            return f.read(dtype="float32", always_2d=True), f.samplerate, full_scale
    except (sf.LibsndfileError, RuntimeError, TypeError) as exc:
        why = _short(str(exc), path)
        if os.path.isfile(path) and "does not exist" in why:  # libsndfile's word for any file it cannot parse
            why = "not a format it reads, or damaged data"
        if shutil.which("ffmpeg") is None:
            raise DecodeError(f"cannot decode ({why}); ffmpeg is not installed to try it") from None
        return _decode_ffmpeg(path, why)


@contextlib.contextmanager
def _quiet_decoder(path: str) -> Iterator[None]:
    """MP3s only: libsndfile's mpg123 prints notes ("Trying to resync...") on the process's stderr (fd 2), where
    they would land between our progress lines. They go to a temp file instead, logged at debug level."""
    if not str(path).lower().endswith(".mp3"):
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            notes = sink.read().decode("utf-8", "replace").strip()
            if notes:
                log.debug("%s: decoder notes: %s", path, " / ".join(notes.splitlines()[:5]))


def _short(message: str, path: str) -> str:
    """An error message without the (long, already known) file path in it."""
    return message.replace(f"Error opening '{path}': ", "").replace(f"{path}: ", "").replace(path, "the file").strip()


def _decode_ffmpeg(path: str, why: str) -> tuple[npt.NDArray[np.float32], int, float]:
    with tempfile.TemporaryDirectory(prefix="xtts_ft_decode_") as tmp:
        out = os.path.join(tmp, "decoded.wav")
        cmd = ["ffmpeg", "-nostdin", "-v", "error", "-i", path, "-vn", "-acodec", "pcm_f32le", "-f", "wav", out]
        try:
            done = subprocess.run(cmd, capture_output=True, timeout=300, check=False)
        except subprocess.TimeoutExpired:
            raise DecodeError("ffmpeg took over 300 s to decode it") from None
        if done.returncode != 0 or not os.path.isfile(out):
            msg = [re.sub(r"^\[[^]]*\] ", "", line) for line in done.stderr.decode("utf-8", "replace").strip().splitlines()]
            said = "; ".join(_short(line, path) for line in msg[-2:]) if msg else "failed"  # the cause, then the verdict
            raise DecodeError(f"cannot decode (soundfile: {why}; ffmpeg: {said})")
        try:
            data, rate = sf.read(out, dtype="float32", always_2d=True)
        except (sf.LibsndfileError, RuntimeError) as exc:
            raise DecodeError(f"ffmpeg output unreadable ({exc})") from None
        return data, rate, FULL_SCALE


def to_mono(data: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Average the channels of a (frames, channels) array (column sums: much faster than mean(axis=1))."""
    if data.shape[1] == 1:
        return data[:, 0]
    mono = data[:, 0].copy()
    for c in range(1, data.shape[1]):
        mono += data[:, c]
    mono *= np.float32(1.0 / data.shape[1])
    return mono


def resample(audio: npt.NDArray[np.float32], from_rate: int, to_rate: int) -> npt.NDArray[np.float32]:
    """Mono float32 ``audio`` at ``to_rate`` (soxr HQ); unchanged when the rates agree."""
    audio = np.asarray(audio, dtype=np.float32)
    if from_rate == to_rate:
        return audio
    return soxr.resample(audio, from_rate, to_rate, quality=RESAMPLE_QUALITY).astype(np.float32)


def load_audio(path: str | Path, rate: int | None = None) -> tuple[npt.NDArray[np.float32], int]:
    """(mono float32 samples, their rate): the file's own rate, or resampled to ``rate``.

    A file neither soundfile nor ffmpeg decodes raises :class:`DecodeError`.
    """
    data, file_rate, _ = decode(str(path))
    mono = to_mono(data)
    if rate is None:
        return mono, file_rate
    return resample(mono, file_rate, rate), rate
