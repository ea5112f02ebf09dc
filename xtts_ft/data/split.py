"""A deterministic train/eval split that does not move when clips are added.

A clip goes to eval when the hash fraction of its id (sha1 of the audio path relative to the
dataset root, mapped to [0, 1)) is below ``eval_fraction``. Each clip's side depends only on
its own id, so adding or removing other clips leaves it where it was. Exceptions, all at the
edges and all deterministic:

- a group (the whole dataset, or one speaker with ``split_by_speaker``) with >= 2 clips and
  ``eval_fraction > 0`` gets at least one eval clip (its lowest hash) and keeps at least one
  training clip (its highest hash goes back to train when every clip landed in eval);
- when more clips qualify than ``eval_max_clips``, the lowest hashes are kept; with
  ``split_by_speaker`` each speaker's lowest-hash clip is taken first, so the cap trims
  speakers' extra eval clips before it removes a speaker from eval altogether.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass, field


def hash_fraction(clip_id: str) -> float:
    """A stable number in [0, 1) for a clip id."""
    return int(hashlib.sha1(clip_id.encode("utf-8")).hexdigest()[:13], 16) / float(16**13)


@dataclass
class Split:
    eval_ids: set[str] = field(default_factory=set)
    speakers_without_eval: list[str] = field(default_factory=list)  # >= 2 clips, but the cap left none in eval


def split_clips(
    clips: list[tuple[str, str]], eval_fraction: float, eval_max_clips: int, by_speaker: bool = False
) -> Split:
    """``clips`` are (clip_id, speaker) pairs; return which ids go to eval."""
    if eval_fraction <= 0 or eval_max_clips <= 0 or len(clips) < 2:
        return Split()  # no eval set wanted (or possible)
    groups: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for clip_id, speaker in clips:
        groups[speaker if by_speaker else ""].append((hash_fraction(clip_id), clip_id))
    firsts: list[tuple[float, str]] = []  # each group's guaranteed eval clip
    rest: list[tuple[float, str]] = []
    for members in groups.values():
        members.sort()
        if len(members) < 2:
            continue
        chosen = [m for m in members if m[0] < eval_fraction] or [members[0]]
        if len(chosen) == len(members):
            chosen = chosen[:-1]
        firsts.append(chosen[0])
        rest.extend(chosen[1:])
    ordered = sorted(firsts) + sorted(rest) if by_speaker else sorted(firsts + rest)
    eval_ids = {clip_id for _, clip_id in ordered[:eval_max_clips]}
    missing = []
    if by_speaker:
        speaker_of = dict(clips)
        with_eval = {speaker_of[c] for c in eval_ids}
        missing = [s for s in _multi_clip_speakers(clips) if s not in with_eval]
    return Split(eval_ids=eval_ids, speakers_without_eval=missing)


def _multi_clip_speakers(clips: list[tuple[str, str]]) -> list[str]:
    counts: dict[str, int] = defaultdict(int)
    for _, speaker in clips:
        counts[speaker] += 1
    return sorted(s for s, n in counts.items() if n >= 2)
