"""The response formats of ``/v1/audio/speech`` this machine can actually produce, and their encoders.

OpenAI's names are ``wav``, ``pcm``, ``flac``, ``mp3``, ``opus`` and ``aac``. Encoding goes
through libsndfile (the ``soundfile`` package): what it can write depends on how it was built
(MP3 needs libsndfile >= 1.1, Opus an Ogg/Opus build; AAC it never writes), so the list is read
from ``soundfile.available_formats()`` / ``available_subtypes()`` instead of being promised.

Streaming: ``pcm`` (raw 16-bit little-endian mono) and ``wav`` (a header with an open length,
then PCM, as streaming players expect) go out piece by piece. ``flac``, ``opus`` and ``mp3`` are
encoded once the last piece is ready: the first two have one header for the whole stream, and
libsndfile starts every MP3 with a Xing frame that counts its frames, so MP3 pieces joined end to
end decode as the first piece only (measured: tests/serve/test_serve_audio_formats.py).

16-bit samples are made once, the same way for every format and every path (streamed or whole, HTTP or
Wyoming: :func:`pcm16`, the project's rounding, :func:`xtts_ft.data.audio.to_pcm16`), and a whole 16-bit file is
written from those samples. Given floats, libsndfile 1.2 scales by 32768 and rounds down, where pcm was
scaled by 32767 and cut towards zero: a whole wav differed from the same audio's pcm by a step in many samples.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from typing import Optional

import numpy as np
import numpy.typing as npt
import soundfile as sf

from xtts_ft.data.audio import to_pcm16

OPENAI_FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")


@dataclass(frozen=True)
class AudioFormat:
    name: str
    media_type: str
    streams: bool  # True: each piece can be sent as soon as it is ready
    sf_format: Optional[str] = None  # libsndfile container ("WAV", "FLAC", "MP3", "OGG"); None: raw PCM
    sf_subtype: Optional[str] = None


_CANDIDATES = {
    "wav": AudioFormat("wav", "audio/wav", True, "WAV", "PCM_16"),
    "pcm": AudioFormat("pcm", "audio/pcm", True),
    "flac": AudioFormat("flac", "audio/flac", False, "FLAC", "PCM_16"),
    "mp3": AudioFormat("mp3", "audio/mpeg", False, "MP3", "MPEG_LAYER_III"),
    "opus": AudioFormat("opus", "audio/ogg", False, "OGG", "OPUS"),
}


def available_formats() -> dict[str, AudioFormat]:
    """The formats the installed libsndfile can write, in OpenAI's order of names."""
    containers = sf.available_formats()
    out: dict[str, AudioFormat] = {}
    for name in OPENAI_FORMATS:
        fmt = _CANDIDATES.get(name)
        if fmt is None:
            continue
        if fmt.sf_format is None or (fmt.sf_format in containers
                                     and fmt.sf_subtype in sf.available_subtypes(fmt.sf_format)):
            out[name] = fmt
    return out


def pcm16(audio: npt.NDArray[np.float32]) -> bytes:
    """Raw 16-bit little-endian samples of float ``audio`` (rounded, saturated)."""
    samples: bytes = to_pcm16(audio).tobytes()  # npt.NDArray is Any to mypy (pyproject.toml says why)
    return samples


def wav_stream_header(sample_rate: int) -> bytes:
    """A 16-bit mono WAV header whose sizes say "unknown" (0xFFFFFFFF): the data follows as it is made."""
    open_size = 0xFFFFFFFF
    return (
        b"RIFF" + struct.pack("<I", open_size) + b"WAVE"
        + b"fmt " + struct.pack("<IHHIIHH", 16, 1, 1, sample_rate, sample_rate * 2, 2, 16)
        + b"data" + struct.pack("<I", open_size)
    )


def encode_whole(audio: npt.NDArray[np.float32], sample_rate: int, fmt: AudioFormat) -> bytes:
    """One complete file (or raw PCM) of ``audio`` in ``fmt``."""
    if fmt.sf_format is None:
        return pcm16(audio)
    buf = io.BytesIO()
    samples = to_pcm16(audio) if fmt.sf_subtype == "PCM_16" else np.clip(audio, -1.0, 1.0)  # (module docstring)
    sf.write(buf, samples, sample_rate, format=fmt.sf_format, subtype=fmt.sf_subtype)
    return buf.getvalue()


class StreamEncoder:
    """Bytes to send for each piece of a streamed response, then the bytes that finish it."""

    def __init__(self, fmt: AudioFormat, sample_rate: int) -> None:
        self.fmt = fmt
        self.sample_rate = sample_rate
        self._started = False
        self._held: list[npt.NDArray[np.float32]] = []

    def piece(self, audio: npt.NDArray[np.float32]) -> bytes:
        if not self.fmt.streams:
            self._held.append(audio)
            return b""
        head = b""
        if self.fmt.name == "wav" and not self._started:
            head = wav_stream_header(self.sample_rate)
        self._started = True
        return head + pcm16(audio)

    def finish(self) -> bytes:
        if self.fmt.streams:
            if self.fmt.name == "wav" and not self._started:  # no audio at all: still a valid (empty) WAV
                return encode_whole(np.zeros(0, dtype=np.float32), self.sample_rate, self.fmt)
            return b""
        audio = np.concatenate(self._held) if self._held else np.zeros(0, dtype=np.float32)
        return encode_whole(audio, self.sample_rate, self.fmt)
