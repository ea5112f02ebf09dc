"""Text mode: a recording of known sentences is cut at its true joins, and a missing sentence is reported."""

from __future__ import annotations

import json

from tests.ingest.ingesthelpers import build_recording, demo_sentences, near, read_metadata, read_segments
from xtts_ft.ingest.command import ingest

PAUSE_S = 0.8


def _check_cuts_at_joins(recording, segments, tolerance=0.2):
    joins = recording.joins()
    for k, seg in enumerate(segments):
        start, end = float(seg["start_s"]), float(seg["end_s"])
        if k > 0:
            assert near(start, joins, tolerance), (k, start, joins)
        if k + 1 < len(segments):
            assert near(end, joins, tolerance), (k, end, joins)
    # the outer cuts hold the first and last words
    assert float(segments[0]["start_s"]) <= recording.spans[0][0]
    assert float(segments[-1]["end_s"]) >= recording.spans[-1][1] - 0.05


def test_alignment_cuts_each_sentence_at_the_true_joins(tmp_path, ingest_cfg, small_recognizer):
    recording = build_recording(tmp_path / "book.wav", 12, pause_s=PAUSE_S)
    text = tmp_path / "book.txt"
    text.write_text("\n".join(recording.sentences) + "\n", encoding="utf-8")
    report = ingest(ingest_cfg, [recording.path], tmp_path / "out", text=text, recognizer=small_recognizer)

    segments = read_segments(tmp_path / "out")
    rows = read_metadata(tmp_path / "out")
    assert [r["text"] for r in rows] == recording.sentences  # one clip per sentence, the original text
    assert {r["transcript_source"] for r in rows} == {"given"}
    assert {s["method"] for s in segments} == {"alignment"}
    _check_cuts_at_joins(recording, segments)
    assert all(float(s["score"]) >= ingest_cfg.ingest.min_score for s in segments)
    assert report.clips == 12 and report.rejected == {} and report.text_without_audio == []
    saved = json.loads((tmp_path / "out" / "ingest_report.json").read_text(encoding="utf-8"))
    assert saved["clips"] == 12 and saved["sources"][0]["clips"] == 12
    assert "clips made: 12" in (tmp_path / "out" / "ingest_report.md").read_text(encoding="utf-8")


def test_a_sentence_missing_from_the_audio_is_reported_not_glued_to_its_neighbours(
        tmp_path, ingest_cfg, small_recognizer):
    skipped = 5
    recording = build_recording(tmp_path / "book.wav", 10, pause_s=PAUSE_S, skip=skipped)
    full_text = [t for _, t in demo_sentences()[:10]]
    text = tmp_path / "book.txt"
    text.write_text(" ".join(full_text), encoding="utf-8")  # one paragraph: split at ። and ?
    report = ingest(ingest_cfg, [recording.path], tmp_path / "out", text=text, recognizer=small_recognizer)

    assert [t["sentence"] for t in report.text_without_audio] == [skipped + 1]
    assert report.text_without_audio[0]["text"] == full_text[skipped]
    rows = read_metadata(tmp_path / "out")
    assert [r["text"] for r in rows] == recording.sentences  # the other nine, each with its own audio
    _check_cuts_at_joins(recording, read_segments(tmp_path / "out"))
    assert "Text with no audio found" in (tmp_path / "out" / "ingest_report.md").read_text(encoding="utf-8")


def test_text_read_across_two_files_in_reading_order(tmp_path, ingest_cfg, small_recognizer):
    first = build_recording(tmp_path / "part1.flac", 4, pause_s=PAUSE_S, seed=1)
    second = build_recording(tmp_path / "part2.flac", 4, pause_s=PAUSE_S, seed=2, start=4)
    text = tmp_path / "book.txt"
    text.write_text("\n".join(first.sentences + second.sentences), encoding="utf-8")
    report = ingest(ingest_cfg, [first.path, second.path], tmp_path / "out", text=text, recognizer=small_recognizer)

    segments = read_segments(tmp_path / "out")
    assert [r["text"] for r in read_metadata(tmp_path / "out")] == first.sentences + second.sentences
    assert [s["source_file"] for s in segments] == [str(first.path)] * 4 + [str(second.path)] * 4
    _check_cuts_at_joins(first, segments[:4])
    _check_cuts_at_joins(second, segments[4:])
    assert [s["clips"] for s in report.sources] == [4, 4]


def test_text_past_the_end_of_the_audio_is_reported(tmp_path, ingest_cfg, small_recognizer):
    recording = build_recording(tmp_path / "book.wav", 6, pause_s=PAUSE_S)
    full_text = [t for _, t in demo_sentences()[:9]]
    text = tmp_path / "book.txt"
    text.write_text("\n".join(full_text), encoding="utf-8")
    report = ingest(ingest_cfg, [recording.path], tmp_path / "out", text=text, recognizer=small_recognizer)
    assert [r["text"] for r in read_metadata(tmp_path / "out")] == recording.sentences
    assert [t["sentence"] for t in report.text_without_audio] == [7, 8, 9]


def test_a_sentence_read_differently_from_the_text_is_not_used(tmp_path, ingest_cfg, small_recognizer):
    """The text names another sentence where the reader said sentence 4: neither is glued to the other."""
    recording = build_recording(tmp_path / "book.wav", 8, pause_s=PAUSE_S)
    other = demo_sentences("spk2")[0][1]
    text = list(recording.sentences)
    text[3] = other
    (tmp_path / "book.txt").write_text("\n".join(text), encoding="utf-8")
    report = ingest(ingest_cfg, [recording.path], tmp_path / "out", text=tmp_path / "book.txt",
                    recognizer=small_recognizer)
    kept = [r["text"] for r in read_metadata(tmp_path / "out")]
    assert kept == recording.sentences[:3] + recording.sentences[4:]
    unused = report.text_without_audio + [r for r in report.rejected_clips if r["reason"] == "low_score"]
    assert [u["text"] for u in unused] == [other]  # reported: as text without audio or as a low score
    segments = read_segments(tmp_path / "out")
    joins = recording.joins()
    assert near(float(segments[2]["end_s"]), joins, 0.2) and near(float(segments[3]["start_s"]), joins, 0.2)
