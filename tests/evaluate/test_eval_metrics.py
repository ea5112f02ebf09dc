import math

import librosa
import numpy as np
import pytest

from tests.evaluate.evalhelpers import SR, voice_like
from xtts_ft.evaluate.metrics import in_range, mcd_dtw, seconds_per_char, silence_ratio


@pytest.fixture(scope="module")
def voice():
    return voice_like(2.0, seed=5)


def test_mcd_of_identical_signals_is_zero(voice):
    assert mcd_dtw(voice, voice.copy(), SR) == pytest.approx(0.0, abs=1e-6)


def test_mcd_of_different_signals_is_positive(voice):
    other = voice_like(2.0, f0=210.0, seed=9)
    assert mcd_dtw(voice, other, SR) > 1.0


def test_time_stretched_copy_is_closer_than_noise(voice):
    stretched = librosa.effects.time_stretch(voice, rate=1.25)
    noise = (0.1 * np.random.default_rng(0).standard_normal(voice.size)).astype(np.float32)
    d_stretch, d_noise = mcd_dtw(voice, stretched, SR), mcd_dtw(voice, noise, SR)
    assert 0 < d_stretch < d_noise


def test_mcd_ignores_leading_and_trailing_silence(voice):
    padded = np.concatenate([np.zeros(SR // 2, np.float32), voice, np.zeros(SR, np.float32)])
    trimmed, untrimmed = mcd_dtw(voice, padded, SR), mcd_dtw(voice, padded, SR, trim_db=None)
    # what is left is the sub-frame offset of the trimmed start (a few dB), not the silence
    assert trimmed < 0.25 * untrimmed
    assert trimmed < mcd_dtw(voice, voice_like(2.0, f0=210.0, seed=9), SR)


def test_mcd_of_empty_audio_is_nan(voice):
    assert math.isnan(mcd_dtw(voice, np.zeros(0, np.float32), SR))


def test_silence_ratio():
    tone = voice_like(1.0)
    assert silence_ratio(tone, SR) < 0.05
    half = np.concatenate([tone, np.zeros_like(tone)])
    assert silence_ratio(half, SR) == pytest.approx(0.5, abs=0.05)
    quiet = tone * 10 ** (-50 / 20)  # peak 0.5 -> about -56 dBFS
    assert silence_ratio(quiet, SR) > 0.95
    assert silence_ratio(np.zeros(0, np.float32), SR) == 1.0


def test_seconds_per_char_and_range():
    assert seconds_per_char(2.0, "abcd") == pytest.approx(0.5)
    assert seconds_per_char(1.0, "  ") == math.inf
    assert in_range(0.1, (0.05, 0.2)) is True
    assert in_range(0.3, (0.05, 0.2)) is False
    assert in_range(0.3, None) is None
