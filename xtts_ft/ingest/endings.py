"""Clip ends that would cut a word: moved to the next pause, or the clip dropped.

An alignment's or a cue's end can fall a little early, inside the last word's final sound; a
recording can stop mid-word. Such clips are what ``prepare`` rejects as ``cut_ending`` (see
:func:`xtts_ft.data.levels.cut_word`), and what teaches a fine-tune to stop mid-word. Before
any clip is written, each kept clip's end is judged with the stricter half of that measure and the
same thresholds (``dataset.cut_ending_*``; :func:`xtts_ft.data.levels.ends_above_pauses`: a sound
dying away does not count as an end here, since ingest can move the end on instead of guessing): an
end above the clip's pause level moves forward, in steps of STEP_S, to the first place where the
clip's last ``cut_ending_tail_ms`` are back at its pause level and stay there for HOLD_S (a pause,
not the closure of a stop consonant or a short gap before the last word), at most SEARCH_S later and
never past the next piece's fence, the file's end or ``dataset.max_duration_s``; with no such place
the clip is rejected as ``cut_ending``. Every end it keeps passes prepare's check. The report counts
both.
"""

from __future__ import annotations

from typing import Sequence

from xtts_ft.config import DatasetConfig
from xtts_ft.data.levels import EndingRule, ends_above_pauses
from xtts_ft.ingest.clips import Clip
from xtts_ft.ingest.source_audio import SourceFile, read_range
from xtts_ft.stop_signals import raise_if_stopped

SEARCH_S = 1.0  # how far after a planned end a pause is looked for (a word's last syllable fits in it)
STEP_S = 0.01
HOLD_S = 0.2  # quiet this long after the new end: a real pause (word gaps and stop closures are shorter)
REASON = "cut_ending"


def settle_endings(clips: Sequence[Clip], sources: Sequence[SourceFile], cfg: DatasetConfig) -> int:
    """Move each kept clip's end out of speech (in place); returns how many ends were moved.

    Clips whose end finds no pause within reach get the ``cut_ending`` rejection. Off when
    ``dataset.cut_ending_check`` is off.
    """
    if not cfg.cut_ending_check:
        return 0
    rule = EndingRule.from_config(cfg)
    moved = 0
    for clip in clips:
        if clip.rejection is not None:
            continue
        raise_if_stopped("ingest: checking clip endings")
        source = sources[clip.file]
        rate = source.sample_rate
        reach = min(clip.end + SEARCH_S, source.duration_s, clip.not_after, clip.start + cfg.max_duration_s)
        audio = read_range(source, clip.start, max(reach, clip.end))
        planned = int(round((clip.end - clip.start) * rate))
        if not ends_above_pauses(audio[:planned], rate, rule):
            continue
        step = max(1, int(round(STEP_S * rate)))
        hold = int(round(HOLD_S / STEP_S))
        quiet = [not ends_above_pauses(audio[:e], rate, rule) for e in range(planned + step, len(audio) + 1, step)]
        at_file_end = reach >= source.duration_s - STEP_S  # quiet up to the file's end counts as a pause
        first = next((i for i in range(len(quiet)) if all(quiet[i:i + hold])
                      and (i + hold <= len(quiet) or at_file_end)), None)
        end = None if first is None else planned + (first + 1) * step
        if end is None:
            clip.rejection = (REASON, f"ends in speech (a word cut off) and no pause follows within "
                                      f"{reach - clip.end:.2f} s (the next speech, the file's end or "
                                      f"dataset.max_duration_s {cfg.max_duration_s:g} s is in the way)")
            continue
        clip.end = round(clip.start + end / rate, 3)
        moved += 1
    return moved
