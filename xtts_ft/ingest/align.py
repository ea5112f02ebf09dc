"""Forced alignment of a long text against long audio, one bounded window at a time.

``torchaudio.functional.forced_align`` costs frames x letters, so it never sees the whole
recording. :func:`align_units` walks forward: from a cursor it takes a group of sentences whose
expected length fills about half of ``window_s`` and aligns them against a window of audio starting
at the cursor, followed by a *wildcard* token that soaks up whatever speech the window holds past
the group (forced alignment must consume every frame). The cursor then moves to the end of the
group's last sentence. The expected length per letter is learnt from the sentences aligned so far.
Near the end of the audio a group that does not fit is halved until it does.

A sentence whose letters score below ``min_score`` may have no audio at all (a passage skipped by
the reader): see :func:`_drop_missing`. Such a sentence is reported as ``text_without_audio``
instead of being glued to its neighbours' audio.

The score of a sentence is the mean, over its letters, of the recogniser's probability of that
letter at the frames aligned to it (``merge_tokens`` spans), 0 to 1.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
import numpy.typing as npt
import torch
import torchaudio.functional as F

from xtts_ft.ingest.analysis import Analysis, LogProbs
from xtts_ft.ingest.text_units import TextUnit
from xtts_ft.stop_signals import raise_if_stopped

log = logging.getLogger(__name__)

FIRST_FRAMES_PER_LETTER = 3.0  # a guess for the first window (40 ms frames, ~8 letters per second)
SLACK_S = 10.0  # extra audio each window gets beyond the expected length of its sentences
STAR_PENALTY = 1.0  # log-probability cost per frame of the wildcard that absorbs audio past a window's text

# One unit as forced alignment placed it, in frames of the aligned stretch: (start, end, score, word spans).
Placement = tuple[int, int, float, list[tuple[int, int]]]


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


def _force(log_probs: LogProbs, units: list[TextUnit],
           blank: int) -> Optional[tuple[list[Placement], float]]:
    """Align ``units`` (in order) to all of ``log_probs``: per unit (start, end, score, word spans), and the
    log-likelihood of the whole path (blank frames included); None when the letters need more frames."""
    targets: list[int] = []
    bounds: list[tuple[int, int]] = []
    for u in units:
        bounds.append((len(targets), len(targets) + len(u.targets)))
        targets.extend(u.targets)
    if _needed_frames(targets) + 1 > len(log_probs):
        return None
    frames: npt.NDArray[np.float32] = log_probs.astype(np.float32)
    # The wildcard: one more class, on each frame STAR_PENALTY (log) below that frame's best class. Put
    # after the sentences, it soaks up the rest of the window (the next sentences' speech) more cheaply
    # than stretching the last letter over it, so the window may hold more audio than its text; the
    # penalty makes a spoken sentence cheaper to align than to leave to the wildcard.
    star = frames.shape[1]
    frames = np.concatenate([frames, frames.max(axis=1, keepdims=True) - STAR_PENALTY], axis=1)
    targets.append(star)
    emission = torch.from_numpy(frames)[None]
    with warnings.catch_warnings():  # torchaudio 2.8 marks forced_align deprecated; it is kept through 2.10
        warnings.simplefilter("ignore")
        path, scores = F.forced_align(emission, torch.tensor([targets], dtype=torch.int32), blank=blank)
        spans = F.merge_tokens(path[0], scores[0].exp(), blank=blank)
    out: list[Placement] = []
    for u, (a, b) in zip(units, bounds):
        mine = spans[a:b]
        words: list[tuple[int, int]] = []
        starts = u.word_starts + [len(u.targets) + 1]
        for w0, w1 in zip(starts, starts[1:]):
            letters = mine[w0: w1 - 1] if w1 - 1 <= len(mine) else mine[w0:]
            words.append((letters[0].start, letters[-1].end))
        score = float(np.mean([s.score for s in mine]))
        out.append((mine[0].start, mine[-1].end, score, words))
    return out, float(scores[0].sum())


def align_units(units: list[TextUnit], analysis: Analysis, blank: int, window_s: float, min_score: float,
                progress: Optional[Callable[[int], object]] = None,
                stage: str = "ingest: aligning the text") -> list[AlignedUnit]:
    """Every unit aligned (or marked missing), in text order; ``stage``: what a stop (SIGINT/SIGTERM) noticed here
    says it interrupted (prepare's short pieces align too)."""
    result = [AlignedUnit(u) for u in units]
    todo: list[AlignedUnit] = []
    for r in result:
        if r.unit.targets:
            todo.append(r)
        else:
            r.missing = "no_letters: nothing in it the recogniser can hear"
    total = len(analysis.log_probs)
    window = int(window_s / analysis.frame_s)
    slack = int(SLACK_S / analysis.frame_s)
    rate = FIRST_FRAMES_PER_LETTER
    cursor, i = 0, 0
    limit: Optional[int] = None
    while i < len(todo):
        raise_if_stopped(stage)
        group = [todo[i]]
        while (i + len(group) < len(todo) and (limit is None or len(group) < limit)
               and sum(len(g.unit.targets) for g in group) * rate < window / 2):
            group.append(todo[i + len(group)])
        expected = sum(len(g.unit.targets) for g in group) * rate
        end = min(total, cursor + max(window, int(expected * 1.5) + slack))
        placed = _align_group(group, analysis.log_probs, cursor, end, blank, min_score)
        if placed is None and len(group) > 1:  # near the end of the audio: try fewer sentences
            limit = len(group) // 2
            continue
        limit = None
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


def _align_group(group: list[AlignedUnit], log_probs: LogProbs, start: int, end: int, blank: int,
                 min_score: float) -> Optional[bool]:
    """Fill ``group``'s alignment from frames [start, end); None when they do not fit in the audio left."""
    units = [g.unit for g in group]
    forced = _force(log_probs[start:end], units, blank)
    if forced is None:
        return None
    keep = list(group)
    placed = forced[0]
    without = _drop_missing(keep, forced, log_probs[start:end], blank, min_score)
    if without is not None:  # every remaining sentence fits its audio once the missing ones are left out
        kept, best = without
        for g in keep:
            if all(g is not k for k in kept):
                g.missing = "text_without_audio: the recording does not say this sentence"
                log.info("sentence %d not found in the audio: %s", g.unit.index + 1, g.unit.text[:60])
        keep, placed = kept, best
    for g, (s, e, score, words) in zip(keep, placed):
        g.start, g.end, g.score = start + s, start + e, score
        g.word_spans = [(start + a, start + b) for a, b in words]
    return True


def _drop_missing(keep: list[AlignedUnit], placed: tuple[list[Placement], float], log_probs: LogProbs,
                  blank: int, min_score: float) -> Optional[tuple[list[AlignedUnit], list[Placement]]]:
    """The group's sentences that have audio and their alignment; None when none is missing.

    A sentence the audio does not say scores far below its neighbours, and forcing its letters onto
    frames that do not hold them costs the whole path likelihood a lot; leaving out a sentence that
    *is* spoken costs a lot too, because its speech must then be read as blank. So, while sentences
    score under ``min_score``, each of them is tried left out, and the removal that raises the path
    log-likelihood most is taken; it stops when all the rest pass or no removal helps.
    """
    current, (current_placed, likelihood) = list(keep), placed
    while True:
        low = [k for k in range(len(current)) if current_placed[k][2] < min_score]
        if not low or len(current) < 2:
            break
        trials: list[tuple[float, list[AlignedUnit], list[Placement]]] = []
        for k in low:
            rest = current[:k] + current[k + 1:]
            again = _force(log_probs, [g.unit for g in rest], blank)
            if again is not None and again[1] > likelihood:
                trials.append((again[1], rest, again[0]))
        if not trials:
            break
        likelihood, current, current_placed = max(trials, key=lambda t: t[0])
    if len(current) == len(keep):
        return None
    return current, current_placed
