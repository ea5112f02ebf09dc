"""Forced alignment of a long text against long audio, one bounded window at a time.

``torchaudio.functional.forced_align`` costs frames x letters, so it never sees the whole
recording. :func:`align_units` walks forward: from a cursor it takes a group of sentences whose
expected length fills about half of ``window_s``, plus one *look-ahead* sentence, and aligns them
against a window of audio starting at the cursor. The look-ahead sentence soaks up whatever speech
the window holds past the group (forced alignment must consume every frame) and is thrown away;
the group's sentences are kept and the cursor moves to the end of the last one. The expected length
per letter is learnt from the sentences aligned so far.

A sentence whose letters score below ``min_score`` may have no audio at all (a passage skipped by
the reader). The group is aligned again without it: when that lets every other sentence of the
group score at least ``min_score``, the sentence is reported as ``text_without_audio`` instead of
being glued to its neighbours' audio.

The score of a sentence is the mean, over its letters, of the recogniser's probability of that
letter at the frames aligned to it (``merge_tokens`` spans), 0 to 1.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from typing import Optional

import numpy as np

from xtts_ft.ingest.analysis import Analysis
from xtts_ft.ingest.text_units import TextUnit

log = logging.getLogger(__name__)

FIRST_FRAMES_PER_LETTER = 3.0  # a guess for the first window (40 ms frames, ~8 letters per second)
SLACK_S = 10.0  # extra audio each window gets beyond the expected length of its sentences


@dataclass
class AlignedUnit:
    unit: TextUnit
    start: int = 0  # global frame of the first letter
    end: int = 0  # global frame after the last letter
    score: float = 0.0
    word_spans: Optional[list[tuple[int, int]]] = None  # (start, end) frames of each word
    missing: Optional[str] = None  # why no audio was found for it

    @property
    def found(self) -> bool:
        return self.missing is None


def _needed_frames(targets: list[int]) -> int:
    """CTC needs a frame per letter plus one blank between two equal letters."""
    return len(targets) + sum(1 for a, b in zip(targets, targets[1:]) if a == b)


def _force(log_probs: np.ndarray, units: list[TextUnit], blank: int):
    """Align ``units`` (in order) to all of ``log_probs``; per unit (start, end, score, word spans)."""
    import torch
    import torchaudio.functional as F

    targets: list[int] = []
    bounds = []
    for u in units:
        bounds.append((len(targets), len(targets) + len(u.targets)))
        targets.extend(u.targets)
    if _needed_frames(targets) > len(log_probs):
        return None
    emission = torch.from_numpy(log_probs.astype(np.float32))[None]
    with warnings.catch_warnings():  # torchaudio 2.8 marks forced_align deprecated; it is kept through 2.10
        warnings.simplefilter("ignore")
        path, scores = F.forced_align(emission, torch.tensor([targets], dtype=torch.int32), blank=blank)
        spans = F.merge_tokens(path[0], scores[0].exp(), blank=blank)
    out = []
    for u, (a, b) in zip(units, bounds):
        mine = spans[a:b]
        words = []
        starts = u.word_starts + [len(u.targets) + 1]
        for w0, w1 in zip(starts, starts[1:]):
            letters = mine[w0: w1 - 1] if w1 - 1 <= len(mine) else mine[w0:]
            words.append((letters[0].start, letters[-1].end))
        score = float(np.mean([s.score for s in mine]))
        out.append((mine[0].start, mine[-1].end, score, words))
    return out


def align_units(units: list[TextUnit], analysis: Analysis, blank: int, window_s: float, min_score: float,
                progress=None) -> list[AlignedUnit]:
    """Every unit aligned (or marked missing), in text order."""
    result = [AlignedUnit(u) for u in units]
    todo = []
    for r in result:
        if r.unit.targets:
            todo.append(r)
        else:
            r.missing = "no_letters"
    total = len(analysis.log_probs)
    window = int(window_s / analysis.frame_s)
    slack = int(SLACK_S / analysis.frame_s)
    rate = FIRST_FRAMES_PER_LETTER
    cursor, i = 0, 0
    while i < len(todo):
        group = [todo[i]]
        while i + len(group) < len(todo) and (sum(len(g.unit.targets) for g in group) * rate < window / 2):
            group.append(todo[i + len(group)])
        lookahead = todo[i + len(group)] if i + len(group) < len(todo) else None
        expected = sum(len(g.unit.targets) for g in group) * rate
        end = min(total, cursor + max(window, int(expected * 1.5) + slack))
        placed = _align_group(group, lookahead, analysis.log_probs, cursor, end, blank, min_score)
        if placed is None:  # the audio ran out before the text
            for r in todo[i:]:
                r.missing = "text_without_audio: the audio ended before this sentence"
            break
        found = [g for g in group if g.found]
        if found:
            letters = sum(len(g.unit.targets) for g in found)
            rate = 0.5 * rate + 0.5 * (found[-1].end - found[0].start) / max(1, letters)
            cursor = found[-1].end
        i += len(group)
        if progress is not None:
            progress(len(group))
    return result


def _align_group(group, lookahead, log_probs, start, end, blank, min_score) -> Optional[bool]:
    """Fill ``group``'s alignment from frames [start, end); None when they do not fit in the audio left."""
    units = [g.unit for g in group] + ([lookahead.unit] if lookahead is not None else [])
    placed = _force(log_probs[start:end], units, blank)
    if placed is None and lookahead is not None:
        units, lookahead = units[:-1], None
        placed = _force(log_probs[start:end], units, blank)
    if placed is None:
        return None
    keep = list(group)
    # A sentence the audio does not hold scores far below its neighbours: try the group without it.
    while True:
        worst = min(range(len(keep)), key=lambda k: placed[k][2])
        if placed[worst][2] >= min_score or len(keep) + (lookahead is not None) < 2:
            break
        others = [u for k, u in enumerate(units) if k != worst]
        again = _force(log_probs[start:end], others, blank)
        rest = [p for k, p in enumerate(again or []) if k < len(keep) - 1]
        if again is None or any(p[2] < min_score for p in rest):
            break
        keep[worst].missing = "text_without_audio: the recording does not say this sentence"
        log.info("sentence %d not found in the audio: %s", keep[worst].unit.index + 1, keep[worst].unit.text[:60])
        keep.pop(worst)
        units, placed = others, again
    for g, (s, e, score, words) in zip(keep, placed):
        g.start, g.end, g.score = start + s, start + e, score
        g.word_spans = [(start + a, start + b) for a, b in words]
    return True
