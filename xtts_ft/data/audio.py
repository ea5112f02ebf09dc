"""The audio stage of one clip: decode, check, mono, resample, trim, normalise, write 16-bit WAV, and the
SNR estimate of the clip as recorded (before trimming: its pauses and lead-in show the noise floor).

:func:`process_audio` runs in worker processes, so this module imports only numpy, soundfile, soxr, the
project's audio reader and :mod:`xtts_ft.quality.voice_activity` (silero-vad through onnxruntime, no torch),
and everything it receives and returns is a small picklable dataclass. Decoding is
:func:`xtts_ft.audio_io.decode` (soundfile, then ffmpeg), the one way the project reads audio files; the rate
clips are written at is ``DATASET_RATE``.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import numpy as np
import numpy.typing as npt
import soundfile as sf
import soxr

from xtts_ft.audio_io import (
    DATASET_RATE,
    RESAMPLE_QUALITY,
    DecodeError,
    TooLongToDecode,
    decode,
    resample,
    to_mono,
)
from xtts_ft.data.levels import EndingRule, cut_word
from xtts_ft.quality.voice_activity import RATE as VAD_RATE
from xtts_ft.quality.voice_activity import snr_db, speech_mask, speech_probabilities
from xtts_ft.tempfiles import atomic_write

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from xtts_ft.config import DatasetConfig

# Files longer than this are not decoded at all (memory bound), whatever trimming might remove.
MIN_DECODE_LIMIT_S = 120.0
FRAME, HOP = 1024, 256  # silence-trimming analysis at 22,050 Hz: 46 ms frames, 11.6 ms hop


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
    cut_ending: Optional[EndingRule]  # None: the check is off
    sample_rate: int = DATASET_RATE
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
            cut_ending=EndingRule.from_config(cfg) if cfg.cut_ending_check else None,
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
    snr_db: Optional[float] = None  # the SNR estimate of a clip that passed (None: no speech or pause to measure)


def trim_silence(y: npt.NDArray[np.float32], top_db: float) -> npt.NDArray[np.float32]:
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


def _peak(x: npt.NDArray[np.float32]) -> float:
    """max |x| without a temporary array (NaN/Inf propagate)."""
    return max(float(x.max()), -float(x.min()))


def to_pcm16(y: npt.NDArray[np.float32], gain: float = 1.0) -> npt.NDArray[np.int16]:
    """Scale, round and saturate to 16-bit samples (one temporary float array)."""
    scaled = np.multiply(y, np.float32(gain * 32767.0), dtype=np.float32)
    np.rint(scaled, out=scaled)
    np.clip(scaled, -32768, 32767, out=scaled)
    pcm: npt.NDArray[np.int16] = scaled.astype("<i2")
    return pcm


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
    cut = cut_word(y, s.sample_rate, s.cut_ending) if s.cut_ending is not None else None
    untrimmed = y
    y = trim_silence(y, s.trim_silence_db)
    duration = len(y) / s.sample_rate
    if duration < s.min_duration_s:
        return reject("too_short", f"{duration:.2f} s after trimming (min {s.min_duration_s:g} s)", duration)
    if duration > s.max_duration_s:
        return reject("too_long", f"{duration:.2f} s after trimming (max {s.max_duration_s:g} s)", duration)
    if cut is not None:
        return reject("cut_ending", cut, duration)
    gain = s.peak_level / max(_peak(y), 1e-9) if s.loudness == "peak" else 1.0
    pcm = to_pcm16(y, gain)
    atomic_write(Path(job.dst), lambda f: sf.write(f, pcm, s.sample_rate, subtype="PCM_16", format="WAV"))
    return AudioResult(job.clip_id, None, "", duration, hashlib.sha1(pcm.tobytes()).hexdigest(),
                       clip_snr(untrimmed, s.sample_rate))


def clip_snr(y: npt.NDArray[np.float32], rate: int) -> Optional[float]:
    """The SNR estimate (:func:`xtts_ft.quality.voice_activity.snr_db`) of a mono clip at ``rate``."""
    audio = resample(y, rate, VAD_RATE)
    return snr_db(audio, speech_mask(speech_probabilities(audio)))
