"""Ingest never cuts a word: a clip end planned inside speech moves to the next pause, or the clip is dropped."""

from __future__ import annotations

import numpy as np
import soundfile as sf

from tests.ingest.ingesthelpers import build_recording
from xtts_ft.config import DatasetConfig
from xtts_ft.data.levels import EndingRule, cut_word, ending_level, ends_above_pauses
from xtts_ft.ingest.clips import Clip
from xtts_ft.ingest.endings import settle_endings
from xtts_ft.ingest.output import IngestReport
from xtts_ft.ingest.source_audio import open_sources, read_range


def _loud_point(y: np.ndarray, rate: int, t0: float, t1: float) -> float:
    """The middle of the loudest 20 ms frame between t0 and t1: inside a vowel."""
    frame = rate // 50
    seg = y[int(t0 * rate): int(t1 * rate)]
    n = len(seg) // frame
    power = (seg[: n * frame].reshape(n, frame).astype(np.float64) ** 2).mean(1)
    return t0 + (int(np.argmax(power)) + 0.5) * frame / rate


def test_ends_in_speech_move_to_the_next_pause_or_the_clip_is_rejected(tmp_path):
    rec = build_recording(tmp_path / "talk.wav", 2, pause_s=0.8, lead_s=0.5)
    y, rate = sf.read(str(rec.path), dtype="float32")
    (a0, a1), (b0, b1) = rec.spans
    stop = _loud_point(y, rate, b0 + 0.5 * (b1 - b0), b1)  # the recording stops mid-word in sentence 2
    sf.write(str(rec.path), y[: int(stop * rate)], rate, subtype="PCM_16")
    sources = open_sources([rec.path])
    cfg = DatasetConfig()
    inside = round(_loud_point(y, rate, a0 + 0.6 * (a1 - a0), a1), 3)  # an alignment that ends a little early

    def clip(end: float, **kw) -> Clip:
        return Clip(0, round(a0 - 0.2, 3), end, "ሰላም", 0.9, "alignment", [0], **kw)

    early, fenced, fine = clip(inside), clip(inside, not_after=inside + 0.02), clip(round(a1 + 0.3, 3))
    at_file_end = Clip(0, round(b0 - 0.3, 3), round(stop, 3), "ሰላም", 0.9, "alignment", [1])
    rejected_before = Clip(0, 0.0, inside, "", 0.0, "alignment", [], rejection=("no_text", "x"))
    moved = settle_endings([early, fenced, fine, at_file_end, rejected_before], sources, cfg)

    assert moved == 1
    assert early.rejection is None and a1 - 0.15 <= early.end <= a1 + 0.3  # into the pause after the sentence
    level, pause = ending_level(read_range(sources[0], early.start, early.end), rate, cfg.cut_ending_tail_ms)
    assert level <= pause + cfg.cut_ending_margin_db  # back at its pause level, not a mere fall
    assert cut_word(read_range(sources[0], early.start, early.end), rate, EndingRule.from_config(cfg)) is None
    assert fine.end == round(a1 + 0.3, 3) and fine.rejection is None  # already in a pause: untouched
    for dropped in (fenced, at_file_end):  # speech beyond its fence, or no audio after it
        assert dropped.rejection[0] == "cut_ending" and dropped.end == (inside if dropped is fenced else round(stop, 3))
    assert rejected_before.rejection == ("no_text", "x") and rejected_before.end == inside

    off = clip(inside)
    assert settle_endings([off], sources, DatasetConfig(cut_ending_check=False)) == 0 and off.end == inside


def test_an_end_that_only_seems_to_die_away_is_still_moved_or_dropped(tmp_path):
    """prepare keeps a clip whose last sound falls (a tight trim); ingest, which can move its ends, does not
    take that for a pause: a recording stopped inside a word where the level had already fallen (a
    consonant after a closure) still loses that clip as cut_ending."""
    rec = build_recording(tmp_path / "talk.wav", 2, pause_s=0.8, lead_s=0.5)
    y, rate = sf.read(str(rec.path), dtype="float32")
    b0, b1 = rec.spans[1]
    start, rule = round(b0 - 0.3, 3), EndingRule.from_config(DatasetConfig())
    stops = [t for t in np.arange(b0 + 0.5 * (b1 - b0), b0 + 0.95 * (b1 - b0), 0.01)
             if ends_above_pauses(y[int(start * rate): int(t * rate)], rate, rule)
             and cut_word(y[int(start * rate): int(t * rate)], rate, rule) is None]
    assert stops  # such points exist in the demo speech: above the pause level, yet falling 12 dB or more
    stop = float(stops[0])
    sf.write(str(rec.path), y[: int(stop * rate)], rate, subtype="PCM_16")
    clip = Clip(0, start, round(stop, 3), "ሰላም", 0.9, "alignment", [1])
    assert settle_endings([clip], open_sources([rec.path]), DatasetConfig()) == 0
    assert clip.rejection[0] == "cut_ending"


def test_the_ingest_report_says_how_many_cuts_it_avoided():
    report = IngestReport(mode="text", out_dir="ds", endings_moved=3)
    assert "cut words avoided: 3 clip end(s)" in report.markdown()
    assert any("cut words avoided: 3" in line for line in report.summary_lines())
