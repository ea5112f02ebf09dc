"""Speech that no text claims: found between (and before, and after) the pieces, and kept out of every clip.

Issue 22: ten seconds of English before the reading went into clip 1, and a sentence the reader added
became part of the previous sentence's clip, because clips are cut in the middle of the gap to the
next piece and short pieces are merged across gaps. Whatever was said in a gap never had text.

The recogniser's frames already say where something was said: a frame whose best guess is a letter
(not the CTC blank). Runs of such frames, joined over short breaks, are the heard speech of a file;
the parts of it that no piece covers (beyond ``EDGE_S`` of slack at a piece's ends, where alignments
are approximate) and that last ``MIN_UNCLAIMED_S`` or more are unclaimed speech. Each becomes a
rejected clip (``speech_without_text``, with what the recogniser heard), the pieces beside it may not
be cut into it (``not_before`` / ``not_after``), the piece after it is never merged with the one
before it, and a piece that shares an unbroken stretch of speech with it is rejected (its alignment
stretched over speech its text does not have).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from xtts_ft.ingest.analysis import Analysis
from xtts_ft.ingest.clips import Clip, Piece
from xtts_ft.ingest.vad import transcribe_frames
from xtts_ft.text import normalize_text

if TYPE_CHECKING:
    from xtts_ft.asr.recognizer import Recognizer

JOIN_S = 0.25  # letters closer than this belong to one stretch of speech (breaks inside a word or phrase)
EDGE_S = 0.2  # an alignment's edges may be this far off the speech they found
MIN_UNCLAIMED_S = 0.4  # shorter uncovered speech is a breath, a click, an alignment edge: not worth a rejection
REASON = "speech_without_text"


def heard_speech(analysis: Analysis, file: int, blank: int) -> list[tuple[float, float]]:
    """(start, end) seconds within ``file`` of the stretches where the recogniser hears letters."""
    frames = analysis.log_probs[analysis.file_frames[file]:analysis.end_frame(file)]
    if not len(frames):
        return []
    letters = np.flatnonzero(frames.argmax(-1) != blank)
    if not len(letters):
        return []
    join = max(1, int(round(JOIN_S / analysis.frame_s)))
    breaks = np.flatnonzero(np.diff(letters) > join)
    starts = np.concatenate([[letters[0]], letters[breaks + 1]])
    ends = np.concatenate([letters[breaks], [letters[-1]]]) + 1
    return [(float(a * analysis.frame_s), float(b * analysis.frame_s)) for a, b in zip(starts, ends)]


def _uncovered(span: tuple[float, float], covered: list[tuple[float, float]]) -> list[tuple[float, float]]:
    parts = [span]
    for c0, c1 in covered:
        parts = [piece for a, b in parts for piece in ((a, min(b, c0)), (max(a, c1), b)) if piece[1] > piece[0]]
    return parts


def guard_unclaimed_speech(pieces: list[Piece], analysis: Analysis, recognizer: Recognizer, method: str) -> list[Clip]:
    """Fence every piece off from unclaimed speech next to it; return that speech as rejected clips."""
    rejected: list[Clip] = []
    for file in range(len(analysis.sources)):
        mine = sorted((p for p in pieces if p.file == file), key=lambda p: p.start)
        covered = [(p.start - EDGE_S, p.end + EDGE_S) for p in mine]
        for span in heard_speech(analysis, file, recognizer.blank_id):
            unclaimed = [(u0, u1) for u0, u1 in _uncovered(span, covered) if u1 - u0 >= MIN_UNCLAIMED_S]
            for p in mine:  # one unbroken stretch of speech, partly without text: a piece in it took some of that
                if unclaimed and p.rejection is None and min(p.end, span[1]) - max(p.start, span[0]) > EDGE_S:
                    p.rejection = (REASON, f"its speech runs on without a break into {unclaimed[0][1] - unclaimed[0][0]:.1f} "
                                           f"s that no text covers (at {unclaimed[0][0]:.1f} s): its alignment took in "
                                           f"speech its text does not have")
            for u0, u1 in unclaimed:
                before = [p for p in mine if p.end <= u0]
                after = [p for p in mine if p.start >= u1]
                if before:
                    before[-1].not_after = min(before[-1].not_after, u0)
                if after:
                    after[0].not_before = max(after[0].not_before, u1)
                    after[0].joinable = False
                heard, _ = transcribe_frames(analysis, file, u0, u1, recognizer)
                rejected.append(Clip(file, round(u0, 3), round(u1, 3), "", 0.0, method, [], rejection=(
                    REASON, f"{u1 - u0:.1f} s of speech that no text or cue covers (heard: {heard[:60]!r}); "
                            f"kept out of the clips beside it")))
    return rejected


HEARD_RATIO = 1.5  # heard letters over text letters beyond which a clip holds speech its text lacks
HEARD_SLACK = 4  # letters the recogniser may add on any clip (a breath heard as a letter, a doubled letter)


def letters(text: str) -> int:
    return sum(ch.isalpha() for ch in text)


def reject_overfull(clips: list[Clip], analysis: Analysis, recognizer: Recognizer) -> None:
    """Reject a kept clip in which the recogniser hears much more than its text says.

    The forced alignment of a sentence can stretch over speech beside it that has no text (a sentence
    the reader added, a cue that was lost): its piece then covers that speech, so
    :func:`guard_unclaimed_speech` cannot see it; what is heard inside the clip can.
    """
    for clip in clips:
        if clip.rejection is not None or not clip.text:
            continue
        heard, _ = transcribe_frames(analysis, clip.file, clip.start, clip.end, recognizer)
        said, expected = letters(heard), letters(normalize_text(clip.text, fold_homophones=True).text)  # 1888: words
        if said > HEARD_RATIO * expected + HEARD_SLACK:
            clip.rejection = (REASON, f"the recogniser hears {said} letters in this clip, its text has {expected}: "
                                      f"speech with no text is inside it (heard: {heard[:60]!r})")
