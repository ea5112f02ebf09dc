"""The predicted overall quality of a clip: DNSMOS P.835's OVRL score, 1 (bad) to 5 (excellent).

DNSMOS (Reddy et al., ICASSP 2022; Microsoft's ONNX models as the ``speechmos`` package ships them) was
trained on listeners' ratings of English speech with noise, reverberation and processing artefacts. It
hears noise and rooms well; it was never taught Amharic, nor synthetic speech, so its number is read as
a difference between two sets of clips scored the same way (a model's samples against the user's own
recordings), never as a verdict on its own. docs/DESIGN.md ("Quality predictor") says why this one and
what was measured.

DNSMOS scores 9.01 s windows. speechmos repeats a shorter clip end to end until it is long enough and
scores every window one second apart (five windows of the same repeats for a 3 s clip); here a short clip
is repeated to exactly one window, which is speechmos's first window, at a fifth of the cost.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from xtts_ft.audio_io import RECOGNIZER_RATE
from xtts_ft.quality.onnx_models import dnsmos

RATE = RECOGNIZER_RATE  # DNSMOS reads 16 kHz
WINDOW_S = 9.01  # DNSMOS's input length (speechmos INPUT_LENGTH)
MIN_AUDIO_S = 0.1  # less than this holds nothing to rate
# What the scores are: stored beside cached scores (a run's reference quality), so another predictor measures again
PREDICTOR_NAME = "DNSMOS P.835 OVRL (speechmos 0.0.1.1), one 9.01 s window"


@dataclass(frozen=True)
class PredictedQuality:
    overall: float  # OVRL: the predicted mean opinion score of the whole clip, 1-5
    signal: float  # SIG: of the speech itself (distortion)
    background: float  # BAK: of the background (noise); higher is quieter


def predict_quality(audio: npt.NDArray[np.float32]) -> PredictedQuality:
    """DNSMOS's scores of a mono 16 kHz clip (a clip under MIN_AUDIO_S: ValueError)."""
    audio = np.clip(np.asarray(audio, np.float32).reshape(-1), -1.0, 1.0)
    if audio.size < MIN_AUDIO_S * RATE:
        raise ValueError(f"{audio.size / RATE:.2f} s of audio; DNSMOS needs at least {MIN_AUDIO_S:g} s")
    window = int(WINDOW_S * RATE)
    if audio.size < window:
        audio = np.resize(audio, window)  # repeated end to end, as speechmos does, to exactly one window
    scores = dnsmos()(audio, RATE, False)
    return PredictedQuality(round(float(scores["ovrl_mos"]), 3), round(float(scores["sig_mos"]), 3),
                            round(float(scores["bak_mos"]), 3))
