"""Cheap objective checks on synthesised audio: silence, speaking rate, and MCD against a recording.

None of these says whether the speech is *right*; they catch the usual failures of a TTS
fine-tune early and cheaply: generation that never stops (babbling to the length limit), long
silences, a speaking rate far outside the training data's, and a voice that drifts away from
the recordings (mel-cepstral distortion, MCD).

MCD here is computed with librosa only (no SPTK): mel cepstra are the DCT-II (orthonormal) of
the natural-log mel amplitude spectrum, c0 (energy) is excluded, frames are aligned with DTW,
and the standard constant 10 * sqrt(2) / ln(10) turns the mean Euclidean distance into dB.
Values are comparable across checkpoints of one run; absolute numbers differ from SPTK-based
papers (different spectral envelope), so compare a run with itself.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import librosa
import numpy as np
import numpy.typing as npt

from xtts_ft.audio_io import DATASET_RATE, load_audio

MCD_CONSTANT = 10.0 * math.sqrt(2.0) / math.log(10.0)
SILENCE_DBFS = -40.0


def load_wav(path: str | Path, sr: int) -> npt.NDArray[np.float32]:
    """Mono float32 audio resampled to ``sr`` (the project's one audio reader)."""
    return load_audio(path, sr)[0]


def _frames_rms(audio: npt.NDArray[np.float32], frame_length: int, hop_length: int) -> npt.NDArray[np.float32]:
    if audio.size == 0:
        return np.zeros(0, dtype=np.float32)
    return librosa.feature.rms(y=audio, frame_length=frame_length, hop_length=hop_length, center=True)[0]


def silence_ratio(audio: npt.NDArray[np.float32], sr: int, threshold_dbfs: float = SILENCE_DBFS) -> float:
    """Share of 20 ms frames whose RMS level is below ``threshold_dbfs`` (full scale = 1.0)."""
    frame = max(16, int(round(0.02 * sr)))
    rms = _frames_rms(np.asarray(audio, dtype=np.float32), frame, frame // 2)
    if rms.size == 0:
        return 1.0
    level = 20.0 * np.log10(np.maximum(rms, 1e-10))
    return float(np.mean(level < threshold_dbfs))


def seconds_per_char(duration_s: float, text: str) -> float:
    """Seconds of audio per character of (normalised) text; spaces count, as in data preparation."""
    n = len(text.strip())
    return float(duration_s / n) if n else float("inf")


def in_range(value: float, value_range: Optional[tuple[float, float]]) -> Optional[bool]:
    """Whether ``value`` lies in the closed range; None when no range is known."""
    if value_range is None:
        return None
    lo, hi = value_range
    return bool(lo <= value <= hi)


def mel_cepstra(
    audio: npt.NDArray[np.float32], sr: int, *, n_mfcc: int = 25, n_mels: int = 80, n_fft: int = 1024, hop_length: int = 256
) -> npt.NDArray[np.float64]:
    """(frames, n_mfcc - 1) mel cepstra without c0: DCT-II (ortho) of the natural-log mel amplitude."""
    power = librosa.feature.melspectrogram(
        y=np.asarray(audio, dtype=np.float32), sr=sr, n_fft=n_fft, hop_length=hop_length, n_mels=n_mels, power=2.0
    )
    log_amplitude = 0.5 * np.log(np.maximum(power, 1e-10))
    cep = librosa.feature.mfcc(S=log_amplitude, n_mfcc=n_mfcc, dct_type=2, norm="ortho")
    return cep[1:].T.astype(np.float64)


def _trim(audio: npt.NDArray[np.float32], top_db: Optional[float]) -> npt.NDArray[np.float32]:
    if top_db is None or audio.size == 0:
        return audio
    # librosa's stubs import its submodules without exporting them; librosa loads them lazily on first use (an import
    # at the top would cost seconds of numba)
    trimmed, _ = librosa.effects.trim(audio, top_db=top_db)  # type: ignore[attr-defined]
    return trimmed if trimmed.size else audio


def mcd_dtw(ref_wav: npt.NDArray[np.float32], syn_wav: npt.NDArray[np.float32], sr: int, *,
            trim_db: Optional[float] = 40.0) -> float:
    """Mel-cepstral distortion in dB between two signals at sample rate ``sr``, DTW-aligned.

    Leading/trailing audio more than ``trim_db`` below each signal's peak is trimmed first (None
    keeps it). The result is the mean, over the DTW path, of 10*sqrt(2)/ln(10) * ||c - c'||.
    """
    ref = _trim(np.asarray(ref_wav, dtype=np.float32), trim_db)
    syn = _trim(np.asarray(syn_wav, dtype=np.float32), trim_db)
    if ref.size == 0 or syn.size == 0:
        return float("nan")
    c_ref, c_syn = mel_cepstra(ref, sr), mel_cepstra(syn, sr)
    _, path = librosa.sequence.dtw(X=c_ref.T, Y=c_syn.T, metric="euclidean")  # type: ignore[attr-defined]  # (_trim)
    diff = c_ref[path[:, 0]] - c_syn[path[:, 1]]
    return float(MCD_CONSTANT * np.mean(np.sqrt(np.sum(diff * diff, axis=1))))


def mcd_files(ref_path: str | Path, syn_path: str | Path, sr: int = DATASET_RATE) -> float:
    """MCD between two audio files, both resampled to ``sr``."""
    return mcd_dtw(load_wav(ref_path, sr), load_wav(syn_path, sr), sr)
