"""Speech and pauses from silero-vad probabilities; machine transcripts from the recogniser's frames.

``speech_regions`` turns the per-window speech probabilities of one file into stretches of speech
(:func:`xtts_ft.quality.voice_activity.speech_mask`: speech starts at ``threshold`` and ends below
``threshold - 0.15``, silero's own rule)
and joins two stretches whose pause is shorter than ``min_pause_s``; the quieter stretches inside a
region are kept as places to split it. ``snap_to_pause`` moves a cut into the nearest pause.
``transcribe_frames`` reads a stretch of the recogniser's log-probabilities greedily (best letter
per frame, repeats merged, blanks dropped), exactly as :class:`Recognizer` decodes a clip.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import numpy as np
import numpy.typing as npt

from xtts_ft.asr.recognizer import Recognizer, greedy_ctc_decode
from xtts_ft.ingest.analysis import RATE, VAD_WINDOW, Analysis
from xtts_ft.ingest.clips import Piece
from xtts_ft.quality.voice_activity import runs, speech_mask

if TYPE_CHECKING:
    import torch

WINDOW_S = VAD_WINDOW / RATE


def pauses(probs: npt.NDArray[np.float32], threshold: float) -> list[tuple[float, float]]:
    """(start, end) seconds of every non-speech stretch of one file."""
    return [(a * WINDOW_S, b * WINDOW_S) for a, b in runs(~speech_mask(probs, threshold))]


def speech_regions(probs: npt.NDArray[np.float32], threshold: float, min_pause_s: float, file: int) -> list[Piece]:
    """Speech stretches of one file as text-less pieces; pauses shorter than min_pause_s join them."""
    regions: list[list[int]] = []
    gaps: list[list[tuple[int, int]]] = []
    min_gap = int(round(min_pause_s / WINDOW_S))
    for a, b in runs(speech_mask(probs, threshold)):
        if regions and a - regions[-1][1] < min_gap:
            gaps[-1].append((regions[-1][1], a))
            regions[-1][1] = b
        else:
            regions.append([a, b])
            gaps.append([])
    pieces: list[Piece] = []
    for (a, b), inner in zip(regions, gaps):
        pieces.append(Piece(file, a * WINDOW_S, b * WINDOW_S, "", 0.0, "vad",
                            inner_pauses=[(x * WINDOW_S, y * WINDOW_S) for x, y in inner]))
    return pieces


def transcribe_frames(analysis: Analysis, file: int, start_s: float, end_s: float,
                      recognizer: Recognizer) -> tuple[str, float]:
    """Greedy transcript of [start_s, end_s) of a file and its confidence (mean best-letter probability)."""
    first = analysis.file_frames[file]
    f0 = first + int(start_s / analysis.frame_s)
    f1 = min(analysis.end_frame(file), first + int(np.ceil(end_s / analysis.frame_s)))
    frames: npt.NDArray[np.float32] = analysis.log_probs[f0:f1].astype(np.float32)
    if not len(frames):
        return "", 0.0
    best = frames.argmax(-1)
    text = greedy_ctc_decode(best.tolist(), recognizer.blank_id, recognizer.id_to_token, recognizer.word_delimiter,
                             recognizer.skip_ids)
    letters = best != recognizer.blank_id
    confidence = float(np.exp(frames.max(-1)[letters]).mean()) if letters.any() else 0.0
    return text, confidence


def snap_to_pause(t: float, file_pauses: list[tuple[float, float]], max_pad: float, is_start: bool,
                  radius: float = 1.0) -> float:
    """``t`` moved into the nearest pause within ``radius`` s (its middle, at most max_pad from speech)."""
    best: Optional[tuple[float, float, float]] = None
    for p0, p1 in file_pauses:
        distance = 0.0 if p0 <= t <= p1 else min(abs(t - p0), abs(t - p1))
        if distance <= radius and (best is None or distance < best[0]):
            best = (distance, p0, p1)
    if best is None:
        return t
    _, p0, p1 = best
    middle = (p0 + p1) / 2
    return max(middle, p1 - max_pad) if is_start else min(middle, p0 + max_pad)


def load_vad_model() -> torch.jit.ScriptModule:
    """silero-vad's voice activity model (the JIT model inside the wheel: no download).

    The one place silero_vad is imported; only ingest without a text needs it.
    """
    from silero_vad import load_silero_vad

    model: torch.jit.ScriptModule = load_silero_vad()
    return model
