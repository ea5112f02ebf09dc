"""The cut_ending measure: does a clip end in speech (a word cut off by the segmenter)?

Used by prepare's audio processing (``data/audio.py``, in the worker processes) and by ingest, which
moves a clip's end to the next pause instead of cutting (``ingest/endings.py``). Numpy only.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

LEVEL_FRAME_S = 0.02  # frames of the level curve behind the cut_ending check
SPEECH_PERCENTILE = 95  # a clip's loud frames: its speech level
FLOOR_DB = -100.0  # digital silence counts as this level, not -inf
# Silence this far below the speech counts as silence whatever its exact level: a clip padded with digital
# zeros at one end and room noise at the other is not "loud at the end" because of the noise.
QUIET_BELOW_SPEECH_DB = 50.0
# A clip whose quietest frame is less than this below its speech has no pause to compare its end with
# (a steady tone, a hum, constant babble): the check gives no verdict. Speech has stop closures and word
# gaps well below this; the demo's espeak clips, cut mid-word, still show at least 16 dB.
MIN_CONTRAST_DB = 15.0


def ending_level(y: np.ndarray, sample_rate: int, tail_ms: float) -> Optional[tuple[float, float]]:
    """(level of the last ``tail_ms`` of ``y``, the clip's pause level) in dBFS, or None when it cannot tell.

    The pause level is the level of the clip's quietest 20 ms frame (a stop closure, a gap between
    words, leading silence), raised to the speech level minus QUIET_BELOW_SPEECH_DB where that is
    quieter still. A clip that ends in a pause has a tail at about its pause level; a clip cut off
    mid-word ends well above it. Run on the untrimmed clip: trimming removes exactly the silence that
    shows a clean ending. None: too short, or no pause in it (see MIN_CONTRAST_DB).
    """
    frame = max(1, int(round(LEVEL_FRAME_S * sample_rate)))
    tail = max(1, int(round(tail_ms / 1000.0 * sample_rate)))
    n = len(y) // frame
    if n < 2 or len(y) <= tail:
        return None

    def level(power: np.ndarray) -> np.ndarray:
        return 10.0 * np.log10(np.maximum(power, 10.0 ** (FLOOR_DB / 10.0)))

    frames = np.asarray(y[: n * frame], dtype=np.float64).reshape(n, frame)
    levels = level(np.einsum("ij,ij->i", frames, frames) / frame)
    speech = float(np.percentile(levels, SPEECH_PERCENTILE))
    pause = max(float(levels.min()), speech - QUIET_BELOW_SPEECH_DB)
    if speech - pause < MIN_CONTRAST_DB:
        return None
    end = np.asarray(y[-tail:], dtype=np.float64)
    return float(level(np.array([np.dot(end, end) / tail]))[0]), pause
