"""Text and speech that do not match: the unmatched audio is in no clip, and the report says why.

Issue 22: speech before the reading went into clip 1, a sentence the reader added became part of the
previous sentence's clip, and subtitles 3 s early with a cue at 00:00:00 gave a clip starting 1.9 s
into the first sentence. Each clip here must hold exactly the speech of the sentences its text names.
"""

from __future__ import annotations

from tests.ingest.ingesthelpers import build_recording, demo_sentences, read_metadata, read_segments
from tests.ingest.test_subtitles import _stamp
from xtts_ft.ingest.command import ingest


def _assert_each_clip_holds_its_own_sentences(out, recording) -> None:
    for seg, row in zip(read_segments(out), read_metadata(out)):
        start, end = float(seg["start_s"]), float(seg["end_s"])
        inside = [k for k, (a, b) in enumerate(recording.spans) if min(b, end) - max(a, start) > 0.3]
        assert " ".join(recording.sentences[k] for k in inside) == row["text"], (seg, row["text"], inside)


def test_speech_without_text_is_rejected_and_never_glued_to_a_neighbour(tmp_path, ingest_cfg, small_recognizer):
    recording = build_recording(tmp_path / "book.wav", 9, pause_s=0.7, skip=7)  # the audio lacks sentence 7
    said = recording.sentences  # 8 sentences: 0-6 and 8 of the pool
    text = said[2:4] + said[5:7] + [demo_sentences()[7][1]] + said[7:]  # no 0, 1 (before the reading), no 4 (added)
    (tmp_path / "book.txt").write_text("\n".join(text), encoding="utf-8")
    report = ingest(ingest_cfg, [recording.path], tmp_path / "out", text=tmp_path / "book.txt",
                    recognizer=small_recognizer)
    _assert_each_clip_holds_its_own_sentences(tmp_path / "out", recording)
    assert report.rejected.get("speech_without_text", 0) >= 2, report.rejected_clips  # before the reading; sentence 4
    details = [r for r in report.rejected_clips if r["reason"] == "speech_without_text"]
    assert any(r["start_s"] < recording.spans[1][1] for r in details), details  # the speech before the reading
    assert [t["text"] for t in report.text_without_audio] == [demo_sentences()[7][1]]  # text with no speech
    assert report.clips >= 3


def test_subtitles_3_s_early_with_a_cue_at_zero_give_a_first_clip_that_starts_at_the_speech(
        tmp_path, ingest_cfg, small_recognizer):
    recording = build_recording(tmp_path / "video.wav", 5, pause_s=0.8, lead_s=0.6)
    blocks = []
    for k, ((a, b), text) in enumerate(zip(recording.spans, recording.sentences), 1):
        blocks.append(f"{k}\n{_stamp(max(0.0, a - 3.0))} --> {_stamp(max(0.5, b - 3.0))}\n{text}\n")  # 3 s early
    srt = tmp_path / "video.srt"
    srt.write_text("\n".join(blocks), encoding="utf-8")
    ingest(ingest_cfg, [recording.path], tmp_path / "out", subtitles=srt, recognizer=small_recognizer)
    segments = read_segments(tmp_path / "out")
    assert segments and float(segments[0]["start_s"]) <= recording.spans[0][0] + 0.1, segments[0]
    _assert_each_clip_holds_its_own_sentences(tmp_path / "out", recording)
