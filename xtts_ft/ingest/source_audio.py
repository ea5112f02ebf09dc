"""Long source recordings, read in bounded blocks: never a whole hour in memory.

:func:`open_sources` checks every file the user named (exists, decodable, has samples) and returns
one :class:`SourceFile` each, laid end to end on one timeline in reading order (``offset_s``).
:func:`read_blocks` yields a file as mono float32 at 16 kHz, ``block_s`` seconds at a time:
soundfile reads ``block_s`` frames, the channels are averaged and a streaming resampler
(``soxr.ResampleStream``) carries its state across blocks, so the result equals resampling the
whole file at once. :func:`read_range` decodes only the span of one clip (seek, then read).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import soundfile as sf
import soxr

from xtts_ft.audio_io import RECOGNIZER_RATE, to_mono
from xtts_ft.errors import DataError

RATE = RECOGNIZER_RATE  # what the recogniser and silero-vad read: the one rate of an ingest analysis


class IngestError(DataError):
    """An ingest input (audio, text or subtitle file, or a flag) cannot be used."""


@dataclass(frozen=True)
class SourceFile:
    path: Path
    sample_rate: int
    frames: int
    channels: int
    offset_s: float  # where the file starts on the timeline of all files, in reading order

    @property
    def duration_s(self) -> float:
        return self.frames / self.sample_rate


def open_sources(paths: Sequence[str | Path]) -> list[SourceFile]:
    """Check and describe each audio file, in the order given; IngestError names the first bad one."""
    out: list[SourceFile] = []
    offset = 0.0
    for given in paths:
        path = Path(given)
        if not path.is_file():
            raise IngestError(f"{path}: audio file not found; check the path")
        try:
            info = sf.info(str(path))
        except (sf.LibsndfileError, RuntimeError) as exc:
            why = str(exc).replace(f"Error opening '{path}': ", "").strip()
            raise IngestError(f"{path}: cannot read the audio ({why}); convert it to WAV or FLAC "
                              f"(e.g. ffmpeg -i IN -ac 1 OUT.flac)") from None
        if info.frames <= 0 or info.samplerate <= 0:
            raise IngestError(f"{path}: the audio file holds no samples; check the recording")
        out.append(SourceFile(path, info.samplerate, info.frames, info.channels, offset))
        offset += info.frames / info.samplerate
    return out


def read_blocks(source: SourceFile, block_s: float) -> Iterator[npt.NDArray[np.float32]]:
    """The file as mono float32 at 16 kHz, at most ``block_s`` seconds of source frames per read."""
    block_frames = max(1, int(block_s * source.sample_rate))
    stream = soxr.ResampleStream(source.sample_rate, RATE, 1, dtype="float32", quality="HQ")
    with sf.SoundFile(str(source.path)) as f:
        while True:
            data = f.read(block_frames, dtype="float32", always_2d=True)
            last = len(data) < block_frames
            mono = to_mono(data) if len(data) else np.zeros(0, np.float32)
            if source.sample_rate == RATE:
                out = mono
            else:
                out = stream.resample_chunk(mono, last=last)
            if len(out):
                yield np.ascontiguousarray(out, dtype=np.float32)
            if last:
                return


def read_range(source: SourceFile, start_s: float, end_s: float) -> npt.NDArray[np.float32]:
    """Mono samples of [start_s, end_s) (seconds within the file) at the file's own rate."""
    start = max(0, int(round(start_s * source.sample_rate)))
    stop = min(source.frames, int(round(end_s * source.sample_rate)))
    with sf.SoundFile(str(source.path)) as f:
        f.seek(start)
        data = f.read(max(0, stop - start), dtype="float32", always_2d=True)
    return to_mono(data) if len(data) else np.zeros(0, np.float32)
