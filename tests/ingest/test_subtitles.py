"""Subtitle mode: cues that are late against the speech are detected, corrected and cut in the pauses."""

from __future__ import annotations

import pytest

from tests.ingest.ingesthelpers import build_recording, near, read_metadata, read_segments
from xtts_ft.config import with_changes
from xtts_ft.ingest.command import ingest
from xtts_ft.ingest.source_audio import IngestError
from xtts_ft.ingest.subtitles import fit_offset, read_cues


def _stamp(t: float, sep: str = ",") -> str:
    ms = int(round(t * 1000))
    return f"{ms // 3600000:02d}:{ms // 60000 % 60:02d}:{ms // 1000 % 60:02d}{sep}{ms % 1000:03d}"


def write_srt(path, recording, shift_s: float, drift: float = 0.0) -> None:
    """Cues on the sentences, ``shift_s + drift * t`` late."""
    blocks = []
    for k, ((a, b), text) in enumerate(zip(recording.spans, recording.sentences), 1):
        late = shift_s + drift * (a + b) / 2
        blocks.append(f"{k}\n{_stamp(a + late)} --> {_stamp(b + late)}\n<i>{text}</i>\n")
    path.write_text("\n".join(blocks), encoding="utf-8")


def test_cues_1_5_s_late_are_detected_and_corrected(tmp_path, ingest_cfg, small_recognizer):
    recording = build_recording(tmp_path / "video.wav", 10, pause_s=0.8)
    srt = tmp_path / "video.srt"
    write_srt(srt, recording, 1.5)
    report = ingest(ingest_cfg, [recording.path], tmp_path / "out", subtitles=srt, recognizer=small_recognizer)

    offset = report.subtitle_offset
    assert offset["corrected"] and abs(offset["offset_s"] + 1.5) < 0.15, offset
    assert abs(offset["drift_s_per_hour"]) < 30, offset  # no drift was put in (0.5 s over a minute of audio)
    segments = read_segments(tmp_path / "out")
    assert report.clips >= 3 and report.rejected == {}
    joins = recording.joins()
    for k, seg in enumerate(segments):
        if k > 0:
            assert near(float(seg["start_s"]), joins, 0.2), (seg, joins)
        if k + 1 < len(segments):
            assert near(float(seg["end_s"]), joins, 0.2), (seg, joins)
    assert {s["method"] for s in segments} == {"subtitle"}
    # short cues are merged up to dataset.max_duration_s; together they are the whole text, in order
    texts = [r["text"] for r in read_metadata(tmp_path / "out")]
    assert " ".join(texts) == " ".join(recording.sentences)
    assert all(float(s["end_s"]) - float(s["start_s"]) <= ingest_cfg.dataset.max_duration_s for s in segments)


def test_a_drifting_offset_is_fitted_and_corrected(tmp_path, ingest_cfg, small_recognizer):
    recording = build_recording(tmp_path / "video.wav", 12, pause_s=0.8)
    srt = tmp_path / "video.srt"
    write_srt(srt, recording, 0.5, drift=0.02)  # 0.5 s late at the start, 1.5 s late after 50 s: 72 s per hour
    report = ingest(ingest_cfg, [recording.path], tmp_path / "out", subtitles=srt, recognizer=small_recognizer)
    offset = report.subtitle_offset
    assert offset["corrected"] and abs(offset["drift_s_per_hour"] + 72) < 12 and abs(offset["offset_s"] + 0.5) < 0.2
    segments = read_segments(tmp_path / "out")
    assert report.clips >= 4 and report.rejected == {}
    for k, seg in enumerate(segments):
        if k > 0:
            assert near(float(seg["start_s"]), recording.joins(), 0.2), (seg, recording.joins())
        if k + 1 < len(segments):
            assert near(float(seg["end_s"]), recording.joins(), 0.2), (seg, recording.joins())


def test_an_offset_beyond_the_limit_is_reported_and_its_clips_rejected(tmp_path, ingest_cfg, small_recognizer):
    recording = build_recording(tmp_path / "video.wav", 6, pause_s=0.8)
    srt = tmp_path / "video.srt"
    write_srt(srt, recording, 1.5)
    ingest_cfg = with_changes(ingest_cfg, ingest={"max_subtitle_offset_s": 1.0})
    with pytest.raises(IngestError) as no_clips:  # every clip rejected: an error that says why, nothing written
        ingest(ingest_cfg, [recording.path], tmp_path / "out", subtitles=srt, recognizer=small_recognizer)
    message = str(no_clips.value)
    assert message.startswith("no clips made (") and "rejected as subtitle_offset" in message
    assert "NOT corrected (over ingest.max_subtitle_offset_s)" in message and not (tmp_path / "out").exists()


def test_vtt_cues_and_a_drift_are_read():
    cues = [(10.0 * k, 10.0 * k + 3) for k in range(8)]
    drifted = [(a + 0.2 + a * 0.001, b + 0.2 + b * 0.001) for a, b in cues]  # 3.6 s per hour
    fit = fit_offset(cues, drifted)
    assert abs(fit.offset_s - 0.2) < 1e-6 and abs(fit.drift_s_per_hour - 3.6) < 1e-3


def test_vtt_file_and_bad_subtitle_files(tmp_path):
    vtt = tmp_path / "a.vtt"
    vtt.write_text("WEBVTT\n\n00:01.500 --> 00:03.250 align:start\nሰላም\nለሁሉም\n\n1:00:00.000 --> 1:00:01.000\nእሺ\n",
                   encoding="utf-8")
    cues = read_cues(vtt)
    assert [(c.start, c.end, c.text) for c in cues] == [(1.5, 3.25, "ሰላም ለሁሉም"), (3600.0, 3601.0, "እሺ")]
    with pytest.raises(IngestError, match="unknown subtitle format '.ass'"):
        read_cues(tmp_path / "a.ass")
    (tmp_path / "b.srt").write_text("no cues here\n", encoding="utf-8")
    with pytest.raises(IngestError, match="no subtitle cues found"):
        read_cues(tmp_path / "b.srt")


def test_a_cue_whose_timing_cannot_be_read_is_reported_by_line_and_its_audio_given_to_no_clip(
        tmp_path, ingest_cfg, small_recognizer):
    recording = build_recording(tmp_path / "video.wav", 6, pause_s=0.8)
    srt = tmp_path / "video.srt"
    write_srt(srt, recording, 0.0)
    lines = srt.read_text(encoding="utf-8").splitlines()
    timing = [k for k, line in enumerate(lines) if "-->" in line]
    lines[timing[2]] = lines[timing[2]].replace(",", ";", 1)  # 00:00:11;661: a typo in the third cue
    lines[timing[4]] = lines[timing[4]][:-3] + "1000"  # ,1000 ms in the fifth
    srt.write_text("\n".join(lines) + "\n", encoding="utf-8")

    unread = []
    assert len(read_cues(srt, unread)) == 4
    assert [(u.line, u.text) for u in unread] == [(timing[2] + 1, recording.sentences[2]),
                                                  (timing[4] + 1, recording.sentences[4])]
    report = ingest(ingest_cfg, [recording.path], tmp_path / "out", subtitles=srt, recognizer=small_recognizer)
    assert [u["line"] for u in report.unread_cues] == [timing[2] + 1, timing[4] + 1]
    assert any(f"line {timing[2] + 1} " in line for line in report.summary_lines())
    assert f"line {timing[4] + 1}: `{lines[timing[4]].strip()}`" in (tmp_path / "out" / "ingest_report.md").read_text(
        encoding="utf-8")
    for seg, row in zip(read_segments(tmp_path / "out"), read_metadata(tmp_path / "out")):
        for k in (2, 4):  # the sentences with no readable cue: their speech is in no clip
            a, b = recording.spans[k]
            inside = min(b, float(seg["end_s"])) - max(a, float(seg["start_s"]))
            assert inside < 0.3, (k, seg, row["text"])
