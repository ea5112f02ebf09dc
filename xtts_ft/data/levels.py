"""The cut_ending measure: does a clip end in speech (a word cut off by the segmenter)?

Used by prepare's audio processing (``data/audio.py``, in the worker processes: :func:`cut_word`) and
by ingest, which moves a clip's end to the next pause instead of cutting (``ingest/endings.py``:
:func:`ends_above_pauses`, the stricter half of the same rule). Numpy only.

Two measures decide. An end in a pause lies at the clip's own pause level (:func:`ending_level`). An
end above it is a cut word only when the level has not been falling into it (:func:`ending_fall`): a
last syllable that dies away, trimmed tightly (``librosa.effects.trim``, a VAD), ends well below the
loudest frame of its last few hundred ms; a word cut at a loud point ends at about that frame's level.
The fall cannot tell every dying sound from a word cut where it was already quiet (a consonant after
a closure looks the same at the end of a sentence and inside a word): ingest, which can always move an
end on to a pause, therefore holds its own ends to the pause level alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from xtts_ft.config import DatasetConfig

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


@dataclass(frozen=True)
class EndingRule:
    """The ``dataset.cut_ending_*`` thresholds (see the config schema for each one's meaning)."""

    tail_ms: float
    margin_db: float
    decay_db: float
    decay_ms: float

    @classmethod
    def from_config(cls, cfg: DatasetConfig) -> EndingRule:
        """From a DatasetConfig (its ``cut_ending_*`` attributes)."""
        return cls(cfg.cut_ending_tail_ms, cfg.cut_ending_margin_db, cfg.cut_ending_decay_db, cfg.cut_ending_decay_ms)


def _level(power: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    level: npt.NDArray[np.float64] = 10.0 * np.log10(np.maximum(power, 10.0 ** (FLOOR_DB / 10.0)))
    return level


def _tail_level(y: npt.NDArray[np.float32], tail: int) -> float:
    end = np.asarray(y[-tail:], dtype=np.float64)
    return float(_level(np.array([np.dot(end, end) / tail]))[0])


def ending_level(y: npt.NDArray[np.float32], sample_rate: int, tail_ms: float) -> Optional[tuple[float, float]]:
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
    frames = np.asarray(y[: n * frame], dtype=np.float64).reshape(n, frame)
    levels = _level(np.einsum("ij,ij->i", frames, frames) / frame)
    speech = float(np.percentile(levels, SPEECH_PERCENTILE))
    pause = max(float(levels.min()), speech - QUIET_BELOW_SPEECH_DB)
    if speech - pause < MIN_CONTRAST_DB:
        return None
    return _tail_level(y, tail), pause


def ending_fall(y: npt.NDArray[np.float32], sample_rate: int, tail_ms: float, window_ms: float) -> float:
    """How many dB the last ``tail_ms`` of ``y`` lie below the loudest 20 ms frame of its last ``window_ms``.

    The frames are counted back from the clip's end (the whole clip when it is shorter than the window).
    About 0 for a clip cut at a loud point (the cut frame is the loudest); a syllable dying away falls
    by 15 dB or more (the demo clips trimmed with ``librosa.effects.trim`` at top_db 20: 16-38 dB).
    """
    frame = max(1, int(round(LEVEL_FRAME_S * sample_rate)))
    tail = max(1, min(len(y), int(round(tail_ms / 1000.0 * sample_rate))))
    n = min(len(y), int(round(window_ms / 1000.0 * sample_rate))) // frame
    if n < 1:
        return 0.0
    window = np.asarray(y[len(y) - n * frame:], dtype=np.float64).reshape(n, frame)
    loudest = float(_level(np.einsum("ij,ij->i", window, window) / frame).max())
    return loudest - _tail_level(y, tail)


def ends_above_pauses(y: npt.NDArray[np.float32], sample_rate: int, rule: EndingRule) -> bool:
    """Whether the last ``rule.tail_ms`` of ``y`` lie more than ``rule.margin_db`` above the clip's pause level
    (False when the clip has no pause to compare with)."""
    ending = ending_level(y, sample_rate, rule.tail_ms)
    return ending is not None and ending[0] > ending[1] + rule.margin_db


def cut_word(y: npt.NDArray[np.float32], sample_rate: int, rule: EndingRule) -> Optional[str]:
    """Why ``y`` ends in a word cut off (one line for the rejection), or None: it ends in a pause, its last
    sound dies away, or the clip has no pause to compare with."""
    ending = ending_level(y, sample_rate, rule.tail_ms)
    if ending is None or ending[0] <= ending[1] + rule.margin_db:
        return None
    fall = ending_fall(y, sample_rate, rule.tail_ms, rule.decay_ms)
    if fall >= rule.decay_db:
        return None
    level, pause = ending
    return (f"last {rule.tail_ms:g} ms at {level:.1f} dBFS, {level - pause:.1f} dB above its pauses "
            f"({pause:.1f} dBFS; limit {rule.margin_db:g} dB) and only {fall:.1f} dB under the loudest "
            f"of its last {rule.decay_ms:g} ms (a last sound dying away falls {rule.decay_db:g} dB)")
