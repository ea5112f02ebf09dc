"""``python -m xtts_ft ingest``: the command line, its one-line errors, and its output going through prepare."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.ingest.ingesthelpers import REPO_ROOT, build_recording, read_metadata
from xtts_ft.asr import SMALL_MODEL_DIR
from xtts_ft.cli import main
from xtts_ft.data import prepare_command
from xtts_ft.data.readers import read_coqui
from xtts_ft.ingest.command import ingest
from xtts_ft.text_settings import make_normalizer


def test_the_command_line_writes_a_dataset_and_prints_a_summary(tmp_path):
    recording = build_recording(tmp_path / "book.wav", 4, pause_s=0.8)
    (tmp_path / "book.txt").write_text("\n".join(recording.sentences), encoding="utf-8")
    config = tmp_path / "ingest.yaml"
    config.write_text("dataset:\n  path: datasets/not_made_yet\n  min_duration_s: 1.0\n"  # ingest makes it
                      f"asr:\n  model: {SMALL_MODEL_DIR}\n  device: cpu\n", encoding="utf-8")
    out = subprocess.run(
        [sys.executable, "-m", "xtts_ft", "ingest", str(recording.path), "--text", str(tmp_path / "book.txt"),
         "--out", str(tmp_path / "ds"), "--config", str(config), "--set", "ingest.min_score=0.3",
         "--speaker", "reader"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "ingest (text): 4 clips" in out.stdout and "rejected: 0" in out.stdout
    rows = read_metadata(tmp_path / "ds")
    assert [r["speaker_name"] for r in rows] == ["reader"] * 4
    for name in ("segments.tsv", "ingest_report.json", "ingest_report.md"):
        assert (tmp_path / "ds" / name).is_file()


@pytest.mark.parametrize("case, expected", [
    ("missing_audio", "nothere.wav: audio file not found"),
    ("unreadable_audio", "junk.wav: cannot read the audio"),
    ("empty_text", "empty.txt: the text file is empty"),
    ("unknown_subtitles", "unknown subtitle format '.ass'"),
    ("text_and_subtitles", "--text and --subtitles: give one of them"),
    ("set_without_config", "--set: only used with --config"),
])
def test_user_mistakes_are_one_line_errors_with_exit_2(tmp_path, capsys, case, expected):
    build_recording(tmp_path / "ok.wav", 1)
    (tmp_path / "junk.wav").write_bytes(b"RIFF" + b"\0" * 40)
    (tmp_path / "empty.txt").write_text(" \n\n", encoding="utf-8")
    (tmp_path / "subs.ass").write_text("[Script Info]\n", encoding="utf-8")
    (tmp_path / "text.txt").write_text("ሰላም።\n", encoding="utf-8")
    args = {
        "missing_audio": [str(tmp_path / "nothere.wav")],
        "unreadable_audio": [str(tmp_path / "junk.wav")],
        "empty_text": [str(tmp_path / "ok.wav"), "--text", str(tmp_path / "empty.txt")],
        "unknown_subtitles": [str(tmp_path / "ok.wav"), "--subtitles", str(tmp_path / "subs.ass")],
        "text_and_subtitles": [str(tmp_path / "ok.wav"), "--text", str(tmp_path / "text.txt"),
                               "--subtitles", str(tmp_path / "subs.ass")],
        "set_without_config": [str(tmp_path / "ok.wav"), "--set", "ingest.min_score=0.5"],
    }[case]
    code = main(["ingest", *args, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error: ") and expected in err[0], err
    assert not (tmp_path / "out").exists()  # nothing written before the inputs are known good


def test_ingest_output_goes_through_prepare_with_every_clip_accounted_for(tmp_path, ingest_cfg, small_recognizer):
    recording = build_recording(tmp_path / "radio.wav", 8, pause_s=0.8, lead_s=1.0)
    report = ingest(ingest_cfg, [recording.path], tmp_path / "ds", recognizer=small_recognizer)
    entries = read_coqui(tmp_path / "ds", ["metadata.csv"], "x")
    assert len(entries) == report.clips and all(e.rejection is None for e in entries)  # extra column ignored
    assert [e.text for e in entries] == [r["text"] for r in read_metadata(tmp_path / "ds")]

    normalizer = make_normalizer(fold_homophones=True)
    prepared = prepare_command(tmp_path / "ds", tmp_path / "prepared", "coqui", normalizer=normalizer,
                               eval_fraction=0.0, num_workers=1, progress=False)
    assert prepared.total == report.clips
    assert prepared.kept + sum(prepared.rejected.values()) == report.clips and prepared.kept >= 6
    assert prepared.rejected["cut_ending"] == 0  # ingest moved or dropped every end that fell in speech
    assert json.loads((tmp_path / "ds" / "ingest_report.json").read_text(encoding="utf-8"))["endings_moved"] >= 0
