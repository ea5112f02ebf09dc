"""VAD mode: no text; silero-vad finds the same joins, the recogniser writes machine transcripts."""

from __future__ import annotations

import numpy as np

from tests.ingest.ingesthelpers import build_recording, near, read_metadata, read_segments
from xtts_ft.ingest.clips import Piece
from xtts_ft.ingest.command import ingest
from xtts_ft.ingest.vad import snap_to_pause, speech_regions
from xtts_ft.text.error_rates import cer


def test_vad_finds_the_joins_and_marks_machine_transcripts(tmp_path, ingest_cfg, small_recognizer):
    recording = build_recording(tmp_path / "radio.wav", 10, pause_s=0.8)
    report = ingest(ingest_cfg, [recording.path], tmp_path / "out", recognizer=small_recognizer)

    segments = read_segments(tmp_path / "out")
    cuts = [float(s["end_s"]) for s in segments[:-1]] + [float(s["start_s"]) for s in segments[1:]]
    for join in recording.joins():  # every join is found ...
        assert near(join, cuts, 0.2), (join, cuts)
    inner = [c for c in cuts if c > recording.spans[0][1] and c < recording.spans[-1][0]]
    assert all(near(c, recording.joins(), 0.2) for c in inner)  # ... and no cut falls inside a sentence
    assert {s["method"] for s in segments} == {"vad"}
    rows = read_metadata(tmp_path / "out")
    assert {r["transcript_source"] for r in rows} == {"machine"}
    assert report.machine_transcripts and "MACHINE" in "\n".join(report.summary_lines())
    heard = " ".join(r["text"] for r in rows)
    assert cer(" ".join(recording.sentences), heard) < 0.35  # the small recogniser's transcripts, not made up


def test_regions_join_short_pauses_and_keep_them_as_split_points():
    window = 512 / 16000
    probs = np.zeros(400, np.float32)
    probs[10:100] = 0.9  # speech, a 5-window (0.16 s) dip, speech, then a 1 s pause, speech
    probs[105:200] = 0.9
    probs[232:300] = 0.9
    pieces = speech_regions(probs, 0.5, 0.3, file=0)
    assert len(pieces) == 2
    assert abs(pieces[0].start - 10 * window) < 1e-6 and abs(pieces[0].end - 200 * window) < 1e-6
    assert pieces[0].inner_pauses == [(100 * window, 105 * window)]
    assert isinstance(pieces[1], Piece) and abs(pieces[1].start - 232 * window) < 1e-6


def test_a_cut_moves_into_the_nearest_pause_keeping_at_most_max_pad_of_silence():
    pauses = [(1.0, 1.4), (5.0, 8.0)]
    assert snap_to_pause(1.5, pauses, 0.5, is_start=True) == 1.2  # middle of a short pause
    assert snap_to_pause(6.9, pauses, 0.5, is_start=True) == 7.5  # a long pause: 0.5 s before the speech
    assert snap_to_pause(5.1, pauses, 0.5, is_start=False) == 5.5  # ... and 0.5 s after it
    assert snap_to_pause(3.0, pauses, 0.5, is_start=True) == 3.0  # no pause within a second: unchanged
