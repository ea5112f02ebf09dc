"""The audio stage of one clip: decode, check, mono, resample, trim, normalise, write 16-bit WAV.

:func:`process_audio` runs in worker processes, so this module imports only numpy,
soundfile and soxr, and everything it receives and returns is a small picklable dataclass.
Decoding goes through soundfile (libsndfile: WAV, FLAC, OGG, and MP3 from libsndfile 1.1 on);
when soundfile cannot decode a file and the ``ffmpeg`` binary is on PATH, the file is decoded
by ffmpeg into a temporary float WAV instead.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import numpy as np
import soundfile as sf
import soxr

from xtts_ft.data.checks import ending_level
from xtts_ft.tempfiles import atomic_write

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from xtts_ft.config import DatasetConfig

SAMPLE_RATE = 22050
FULL_SCALE = 0.999  # a sample at or above this magnitude counts as clipped
# 8-bit files cannot reach 0.999 on the positive side (their largest value is 127/128).
FULL_SCALE_8BIT = 127.0 / 128.0
RESAMPLE_QUALITY = "HQ"
# Files longer than this are not decoded at all (memory bound), whatever trimming might remove.
MIN_DECODE_LIMIT_S = 120.0
FRAME, HOP = 1024, 256  # silence-trimming analysis at 22,050 Hz: 46 ms frames, 11.6 ms hop


class DecodeError(Exception):
    """The file could not be decoded by soundfile or ffmpeg (becomes an 'unreadable' rejection)."""


class TooLongToDecode(Exception):
    """The file is longer than the decode limit; it is not read into memory (a 'too_long' rejection)."""


@dataclass(frozen=True)
class AudioSettings:
    """Every config value the audio stage depends on (part of the cache key)."""

    trim_silence_db: float
    loudness: str
    peak_level: float
    max_clipped_fraction: float
    min_duration_s: float
    max_duration_s: float
    silence_peak_db: float
    cut_ending_check: bool
    cut_ending_tail_ms: float
    cut_ending_margin_db: float
    sample_rate: int = SAMPLE_RATE
    quality: str = RESAMPLE_QUALITY

    @classmethod
    def from_config(cls, cfg: DatasetConfig) -> AudioSettings:
        return cls(
            trim_silence_db=cfg.trim_silence_db,
            loudness=cfg.loudness,
            peak_level=cfg.peak_level,
            max_clipped_fraction=cfg.max_clipped_fraction,
            min_duration_s=cfg.min_duration_s,
            max_duration_s=cfg.max_duration_s,
            silence_peak_db=cfg.silence_peak_db,
            cut_ending_check=cfg.cut_ending_check,
            cut_ending_tail_ms=cfg.cut_ending_tail_ms,
            cut_ending_margin_db=cfg.cut_ending_margin_db,
        )

    @property
    def decode_limit_s(self) -> float:
        return max(MIN_DECODE_LIMIT_S, 10.0 * self.max_duration_s)


@dataclass(frozen=True)
class AudioJob:
    clip_id: str
    src: str  # source audio file
    dst: str  # output WAV (written only when the clip passes)
    settings: AudioSettings


@dataclass(frozen=True)
class AudioResult:
    clip_id: str
    reason: Optional[str]  # None: the clip passed and dst was written
    detail: str = ""
    duration_s: float = 0.0  # after trimming
    pcm_sha1: str = ""  # of the written 16-bit samples


def decode(path: str, limit_s: float = float("inf")) -> tuple[np.ndarray, int, float]:
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
def _quiet_decoder(path: str):
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


def _decode_ffmpeg(path: str, why: str) -> tuple[np.ndarray, int, float]:
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


def trim_silence(y: np.ndarray, top_db: float) -> np.ndarray:
    """Cut leading/trailing frames whose energy is more than top_db below the loudest frame's.

    Energies of FRAME-long frames every HOP samples, from per-HOP block sums (one pass over y).
    """
    if top_db <= 0 or len(y) <= FRAME:
        return y
    n_blocks = len(y) // HOP
    blocks = y[: n_blocks * HOP].reshape(n_blocks, HOP)
    block_energy = np.einsum("ij,ij->i", blocks, blocks).astype(np.float64)  # 256-sample sums: float32 is enough
    per = FRAME // HOP
    csum = np.concatenate(([0.0], np.cumsum(block_energy)))
    energy = csum[per:] - csum[:-per]  # frame i covers blocks i .. i+per-1
    n_frames = len(energy)
    loud = np.flatnonzero(energy > energy.max() * 10.0 ** (-top_db / 10.0))
    if loud.size == 0:
        return y[:0]
    start = int(loud[0]) * HOP
    end = len(y) if loud[-1] == n_frames - 1 else int(loud[-1]) * HOP + FRAME
    return y[start:end]


def _peak(x: np.ndarray) -> float:
    """max |x| without a temporary array (NaN/Inf propagate)."""
    return max(float(x.max()), -float(x.min()))


def to_mono(data: np.ndarray) -> np.ndarray:
    """Average the channels of a (frames, channels) array (column sums: much faster than mean(axis=1))."""
    if data.shape[1] == 1:
        return data[:, 0]
    mono = data[:, 0].copy()
    for c in range(1, data.shape[1]):
        mono += data[:, c]
    mono *= np.float32(1.0 / data.shape[1])
    return mono


def to_pcm16(y: np.ndarray, gain: float = 1.0) -> np.ndarray:
    """Scale, round and saturate to 16-bit samples (one temporary float array)."""
    scaled = np.multiply(y, np.float32(gain * 32767.0), dtype=np.float32)
    np.rint(scaled, out=scaled)
    np.clip(scaled, -32768, 32767, out=scaled)
    return scaled.astype("<i2")


def process_audio(job: AudioJob) -> AudioResult:
    """Run every audio check on one clip; write ``job.dst`` (atomically) only when it passes."""
    s = job.settings

    def reject(reason: str, detail: str, duration: float = 0.0) -> AudioResult:
        return AudioResult(job.clip_id, reason, detail, duration)

    try:
        data, rate, full_scale = decode(job.src, s.decode_limit_s)
    except DecodeError as exc:
        return reject("unreadable", str(exc))
    except TooLongToDecode as exc:
        return reject("too_long", f"{exc} before trimming; not decoded (limit {s.decode_limit_s:.0f} s)")
    if data.size == 0 or rate <= 0:
        return reject("empty_audio", "no samples")
    peak = _peak(data)
    if not np.isfinite(peak):
        bad = data.size - int(np.count_nonzero(np.isfinite(data)))
        return reject("non_finite", f"{bad} NaN/Inf samples")
    clipped = 0.0 if peak < full_scale else np.count_nonzero(np.abs(data) >= full_scale) / data.size
    mono = to_mono(data)
    del data
    peak = _peak(mono)
    if peak <= 10.0 ** (s.silence_peak_db / 20.0):
        level = 20 * np.log10(peak) if peak > 0 else float("-inf")
        return reject("silent", f"peak {level:.1f} dBFS (threshold {s.silence_peak_db:g} dBFS)")
    if clipped > s.max_clipped_fraction:
        return reject("clipped", f"{clipped:.2%} of samples at full scale (limit {s.max_clipped_fraction:.2%})")
    y = soxr.resample(mono, rate, s.sample_rate, quality=s.quality) if rate != s.sample_rate else mono
    ending = ending_level(y, s.sample_rate, s.cut_ending_tail_ms) if s.cut_ending_check else None
    y = trim_silence(y, s.trim_silence_db)
    duration = len(y) / s.sample_rate
    if duration < s.min_duration_s:
        return reject("too_short", f"{duration:.2f} s after trimming (min {s.min_duration_s:g} s)", duration)
    if duration > s.max_duration_s:
        return reject("too_long", f"{duration:.2f} s after trimming (max {s.max_duration_s:g} s)", duration)
    if ending is not None and ending[0] > ending[1] + s.cut_ending_margin_db:
        return reject("cut_ending", f"last {s.cut_ending_tail_ms:g} ms at {ending[0]:.1f} dBFS, "
                                    f"{ending[0] - ending[1]:.1f} dB above its pauses ({ending[1]:.1f} dBFS; "
                                    f"limit {s.cut_ending_margin_db:g} dB)", duration)
    gain = s.peak_level / max(_peak(y), 1e-9) if s.loudness == "peak" else 1.0
    pcm = to_pcm16(y, gain)
    atomic_write(Path(job.dst), lambda f: sf.write(f, pcm, s.sample_rate, subtype="PCM_16", format="WAV"))
    return AudioResult(job.clip_id, None, "", duration, hashlib.sha1(pcm.tobytes()).hexdigest())
