"""From found speech (aligned sentences, VAD regions, subtitle cues) to clips within the duration bounds.

Every mode hands over :class:`Piece` s: stretches of speech inside one file, in order, with their text
and score. The planning here is shared:

- a piece longer than ``max_duration_s`` is split at its longest inner pause (between words for
  aligned text, the quietest stretch for VAD) until each part fits;
- a piece shorter than ``min_duration_s`` is merged with the next one when both lie in the same file,
  nothing was lost between them and the result still fits;
- each clip is cut in the pauses around it: at the middle of the silence to its neighbour, but never
  more than ``max_pad_s`` of silence before its first or after its last word.

Pieces that still do not fit become rejected clips, with the reason; nothing is dropped unreported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass
class Piece:
    file: int  # index of the source file
    start: float  # first speech, seconds within the file
    end: float  # last speech
    text: str
    score: float
    method: str  # alignment | vad | subtitle
    units: list[int] = field(default_factory=list)  # sentence / cue numbers it holds (0-based)
    inner_pauses: list[tuple[float, float]] = field(default_factory=list)  # silences inside it (start, end)
    words: list[str] = field(default_factory=list)  # text split at inner_pauses: len(inner_pauses) + 1 parts
    joinable: bool = True  # False: something was lost right before it, never merge it with the previous one
    not_before: float = 0.0  # its clip may not start earlier (unclaimed speech before it, see gaps.py)
    not_after: float = float("inf")  # nor end later
    rejection: Optional[tuple[str, str]] = None  # set before planning (gaps.py): its clip is rejected, never merged


@dataclass
class Clip:
    file: int
    start: float  # cut points, seconds within the file
    end: float
    text: str
    score: float
    method: str
    units: list[int]
    machine: bool = False
    rejection: Optional[tuple[str, str]] = None  # (reason, detail)
    not_before: float = 0.0  # limits of its piece (see Piece): later snapping keeps to them
    not_after: float = float("inf")

    @property
    def duration(self) -> float:
        return self.end - self.start


def split_long(piece: Piece, max_s: float) -> list[Piece]:
    """Split at the longest inner pause until every part is at most ``max_s`` seconds of speech."""
    if piece.end - piece.start <= max_s or not piece.inner_pauses:
        return [piece]
    k = max(range(len(piece.inner_pauses)), key=lambda j: piece.inner_pauses[j][1] - piece.inner_pauses[j][0])
    p0, p1 = piece.inner_pauses[k]
    words = piece.words if len(piece.words) == len(piece.inner_pauses) + 1 else None
    left = Piece(piece.file, piece.start, p0, " ".join(words[: k + 1]) if words else piece.text, piece.score,
                 piece.method, piece.units, piece.inner_pauses[:k], words[: k + 1] if words else [], piece.joinable,
                 not_before=piece.not_before, rejection=piece.rejection)
    right = Piece(piece.file, p1, piece.end, " ".join(words[k + 1:]) if words else piece.text, piece.score,
                  piece.method, piece.units, piece.inner_pauses[k + 1:], words[k + 1:] if words else [], False,
                  not_after=piece.not_after, rejection=piece.rejection)
    return split_long(left, max_s) + split_long(right, max_s)


def merge_short(pieces: list[Piece], min_s: float, max_s: float, greedy: bool = False) -> list[Piece]:
    """Merge a piece shorter than ``min_s`` into the next (``greedy``: merge while the result fits ``max_s``)."""
    out: list[Piece] = []
    for p in pieces:
        last = out[-1] if out else None
        if (last is not None and p.joinable and last.file == p.file and p.end - last.start <= max_s
                and last.rejection is None and p.rejection is None
                and (greedy or last.end - last.start < min_s)):
            out[-1] = Piece(last.file, last.start, p.end, f"{last.text} {p.text}", min(last.score, p.score),
                            last.method, last.units + p.units, last.inner_pauses + [(last.end, p.start)],
                            [], last.joinable, last.not_before, p.not_after)
        else:
            out.append(p)
    return out


def cut_points(pieces: list[Piece], file_durations: list[float], max_pad: float) -> list[tuple[float, float]]:
    """(start, end) cut of each piece: in the middle of the pause to its neighbour, at most max_pad from speech."""
    cuts = []
    for k, p in enumerate(pieces):
        prev_end = pieces[k - 1].end if k > 0 and pieces[k - 1].file == p.file else 0.0
        next_start = pieces[k + 1].start if k + 1 < len(pieces) and pieces[k + 1].file == p.file \
            else file_durations[p.file]
        start = max((prev_end + p.start) / 2, p.start - max_pad, 0.0, p.not_before)
        end = min((p.end + next_start) / 2, p.end + max_pad, file_durations[p.file], p.not_after)
        cuts.append((start, end))
    return cuts


def plan_clips(pieces: list[Piece], file_durations: list[float], min_s: float, max_s: float, max_pad: float,
               min_score: Optional[float], greedy: bool = False, machine: bool = False) -> list[Clip]:
    """Split, merge and cut ``pieces`` (in timeline order); reject what does not fit, with the reason."""
    split = [part for p in pieces for part in split_long(p, max_s)]
    # greedy merging leaves room for the silence around the speech
    merged = merge_short(split, min_s, max_s - (2 * max_pad if greedy else 0.0), greedy)
    clips = []
    for p, (start, end) in zip(merged, cut_points(merged, file_durations, max_pad)):
        if end - start > max_s >= p.end - p.start:  # the speech fits: keep less silence around it
            extra = (max_s - (p.end - p.start)) / 2
            start, end = max(start, p.start - extra, p.not_before), min(end, p.end + extra, p.not_after)
        clip = Clip(p.file, round(start, 3), round(end, 3), " ".join(p.text.split()), round(p.score, 4), p.method,
                    p.units, machine, not_before=p.not_before, not_after=p.not_after)
        if p.rejection is not None:
            clip.rejection = p.rejection
        elif not clip.text:
            clip.rejection = ("no_text", "the recogniser heard no letters in this speech" if machine
                              else "no text for this speech")
        elif clip.duration > max_s:
            clip.rejection = ("too_long", f"{clip.duration:.2f} s with no pause to split at (max {max_s:g} s)")
        elif p.end - p.start < min_s:  # speech, not the silence around it (prepare trims that)
            clip.rejection = ("too_short", f"{p.end - p.start:.2f} s of speech and no neighbour to merge with "
                                           f"(min {min_s:g} s)")
        elif min_score is not None and clip.score < min_score:
            clip.rejection = ("low_score", f"alignment score {clip.score:.2f} < ingest.min_score {min_score:g}")
        clips.append(clip)
    return clips
