"""Where the speech is in a clip, and what that says: the SNR estimate and the speech after a moment.

:func:`speech_probabilities` runs silero-vad over a whole 16 kHz clip: one probability per 32 ms window
(512 samples), each window seen with the 64 samples before it and the network's state carried from
window to window, exactly as silero's own ``SileroVADSequence.audio_forward`` does (tests check the two
agree), in calls of at most MAX_FRAMES windows. :func:`speech_mask` turns probabilities into speech and
pauses with silero's hysteresis (speech starts at ``threshold`` and ends below ``threshold - 0.15``).

:func:`snr_db` is the SNR estimate of prepare, ``assess`` and the evaluation: the mean power of the speech
windows against the noise floor, a low percentile of the power of the pause windows at least one window
away from speech, or of all windows (the clip's quietest moments) where that is lower: silero's mistakes
(the first windows of a clip, a word's onset or decay marked as pause) only ever raise the pauses' floor, and
a clip cut tightly has no pause at all. Digital silence counts as NOISE_FLOOR_DB, so a clean synthetic clip
has a large finite SNR, not infinity. A clip with too little speech (silero hears none in a tone) gives no
estimate (None).
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import numpy.typing as npt

from xtts_ft.audio_io import RECOGNIZER_RATE
from xtts_ft.quality.onnx_models import vad_session

RATE = RECOGNIZER_RATE  # what silero-vad reads
WINDOW = 512  # samples at 16 kHz: silero's window, 32 ms
WINDOW_S = WINDOW / RATE
CONTEXT = 64  # samples of the previous window each window is seen with (silero's 16 kHz context)
MAX_FRAMES = 512  # windows per call (about 16 s): bounded memory for long files
STATE = (1, 1, 128)  # the network's recurrent state (h and c), carried from call to call
SPEECH_THRESHOLD = 0.5  # silero's default speech probability
HYSTERESIS = 0.15
NOISE_FLOOR_DB = -100.0  # a pause of digital zeros counts as this level
MIN_SPEECH_WINDOWS = 3  # about 0.1 s of speech
MIN_PAUSE_WINDOWS = 3  # about 0.1 s of pause
# The noise floor: this percentile of the pause windows' power (not their median: silero calls a few windows of a
# word's start or end a pause, and its first window or two of a clip, before it has heard anything, are often
# called pauses whatever they hold) ...
PAUSE_PERCENTILE = 20
# ... or this percentile of all windows' power, the quietest of the clip, when that is lower: the floor cannot lie
# above the clip's quietest moments, and a clip cut tightly has no pause at all (noise keeps silero's speech on
# through short gaps, too)
QUIET_PERCENTILE = 2


def speech_probabilities(audio: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """silero-vad's speech probability of each 32 ms window of a mono 16 kHz clip (the last one zero-padded)."""
    audio = np.ascontiguousarray(audio, dtype=np.float32).reshape(-1)
    n = -(-audio.size // WINDOW)
    if n == 0:
        return np.zeros(0, np.float32)
    frames = np.zeros((n, WINDOW), np.float32)
    frames.reshape(-1)[: audio.size] = audio
    context = np.zeros((n, CONTEXT), np.float32)
    context[1:] = frames[:-1, -CONTEXT:]
    windows = np.concatenate((context, frames), axis=1)
    session = vad_session()
    hidden: npt.NDArray[np.float32] = np.zeros(STATE, np.float32)
    cell: npt.NDArray[np.float32] = np.zeros(STATE, np.float32)
    out = []
    for first in range(0, n, MAX_FRAMES):
        probs, hidden, cell = session.run(["speech_probs", "hn", "cn"],
                                          {"input": windows[first: first + MAX_FRAMES], "h": hidden, "c": cell})
        out.append(np.asarray(probs, np.float32).reshape(-1))
    return np.concatenate(out)


def runs(mask: npt.NDArray[np.bool_]) -> list[tuple[int, int]]:
    """[start, end) of each run of True."""
    edges = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist()))


def speech_mask(probs: npt.NDArray[np.float32], threshold: float = SPEECH_THRESHOLD) -> npt.NDArray[np.bool_]:
    """Speech (True) or pause per window, with silero's hysteresis."""
    mask: npt.NDArray[np.bool_] = np.zeros(len(probs), bool)
    on = False
    for k, p in enumerate(probs):
        on = p >= threshold if not on else p >= threshold - HYSTERESIS
        mask[k] = on
    return mask


def window_power(audio: npt.NDArray[np.float64], windows: int) -> npt.NDArray[np.float64]:
    """Mean square of each 32 ms window (the last one zero-padded), ``windows`` of them."""
    padded: npt.NDArray[np.float64] = np.zeros(windows * WINDOW, np.float64)
    take = min(audio.size, padded.size)
    padded[:take] = audio[:take]
    frames = padded.reshape(windows, WINDOW)
    return np.einsum("ij,ij->i", frames, frames) / WINDOW


def snr_db(audio: npt.NDArray[np.float32], mask: npt.NDArray[np.bool_]) -> Optional[float]:
    """Speech power against the noise floor in dB (see the module doc); None without enough speech to measure."""
    if mask.sum() < MIN_SPEECH_WINDOWS or len(mask) < MIN_SPEECH_WINDOWS + MIN_PAUSE_WINDOWS:
        return None
    power = window_power(np.asarray(audio, np.float64).reshape(-1), len(mask))
    near_speech = mask | np.concatenate(([False], mask[:-1])) | np.concatenate((mask[1:], [False]))
    pause = ~near_speech if (~near_speech).sum() >= MIN_PAUSE_WINDOWS else ~mask
    floor = float(np.percentile(power, QUIET_PERCENTILE))
    if pause.sum() >= MIN_PAUSE_WINDOWS:
        floor = min(floor, float(np.percentile(power[pause], PAUSE_PERCENTILE)))
    noise = max(floor, 10.0 ** (NOISE_FLOOR_DB / 10.0))
    speech = float(power[mask].mean())
    snr: float = round(10.0 * np.log10(max(speech - noise, noise * 1e-3) / noise), 2)  # numpy: Any to mypy
    return snr


def speech_after(mask: npt.NDArray[np.bool_], t: float) -> float:
    """Seconds of speech in the windows that start at or after ``t`` seconds (a window cut by ``t``: its part after)."""
    starts = np.arange(len(mask)) * WINDOW_S
    after = np.clip(starts + WINDOW_S - max(t, 0.0), 0.0, WINDOW_S)
    return round(float(after[mask].sum()), 3)
