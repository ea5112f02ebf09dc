"""prepare_dataset as the integrator calls it: incremental re-runs, output format, errors, entry points."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import soundfile as sf

import xtts_ft.text
from tests.data.datahelpers import SENTENCES, make_cfg, standin_normalize, write_audio
from xtts_ft.data import PrepareReport, prepare_command, prepare_dataset, read_metadata
from xtts_ft.errors import ConfigError, DataError, UserError
from xtts_ft.text_settings import make_normalizer


def _prep(root: Path, out: Path, **cfg) -> PrepareReport:
    return prepare_dataset(make_cfg(root, **cfg), out, normalizer=standin_normalize, progress=False)


def _rows(out: Path) -> list[dict]:
    return read_metadata(out / "metadata_train.csv") + read_metadata(out / "metadata_eval.csv")


def _add_clip(root: Path, i: int) -> None:
    write_audio(root / "wavs" / f"LJ{i:03d}.wav", seconds=2.0, freq=200 + 37 * i)
    with open(root / "metadata.csv", "a", encoding="utf-8") as f:
        f.write(f"LJ{i:03d}|{SENTENCES[i]}\n")


def test_incremental_rerun_processes_only_new_or_changed_clips(ljspeech: Path, tmp_path: Path):
    out = tmp_path / "out"
    first = _prep(ljspeech, out, eval_fraction=0.3)
    assert (first.processed, first.reused, first.kept) == (6, 0, 6)
    again = _prep(ljspeech, out, eval_fraction=0.3)
    assert (again.processed, again.reused) == (0, 6)
    assert again.to_dict()["rejected"] == first.to_dict()["rejected"]

    touched = ljspeech / "wavs" / "LJ002.wav"
    later = time.time() + 5
    os.utime(touched, (later, later))
    assert _prep(ljspeech, out, eval_fraction=0.3).processed == 1

    eval_before = {r["audio_file"] for r in read_metadata(out / "metadata_eval.csv")}
    _add_clip(ljspeech, 6)
    grown = _prep(ljspeech, out, eval_fraction=0.3)
    assert (grown.processed, grown.kept) == (1, 7)
    eval_after = {r["audio_file"] for r in read_metadata(out / "metadata_eval.csv")}
    assert eval_before <= eval_after  # adding a clip moved no existing clip out of eval

    # Remove a clip: it disappears from the metadata and from wavs/.
    lines = (ljspeech / "metadata.csv").read_text(encoding="utf-8").splitlines()
    (ljspeech / "metadata.csv").write_text("\n".join(lines[1:]) + "\n", encoding="utf-8")
    shrunk = _prep(ljspeech, out, eval_fraction=0.3)
    assert (shrunk.processed, shrunk.kept) == (0, 6)
    assert not (out / "wavs" / "LJ000.wav").exists()
    assert sorted(os.listdir(out / "wavs")) == sorted(Path(r["audio_file"]).name for r in _rows(out))

    # A setting that changes the audio output reprocesses every clip.
    assert _prep(ljspeech, out, eval_fraction=0.3, peak_level=0.5).processed == 6


def test_cached_rejections_are_reused_and_parked_wavs_come_back(ljspeech: Path, tmp_path: Path):
    out = tmp_path / "out"
    write_audio(ljspeech / "wavs" / "short.wav", seconds=0.2)
    with open(ljspeech / "metadata.csv", "a", encoding="utf-8") as f:
        f.write(f"short|{SENTENCES[9]}\nLJ007|{SENTENCES[0]}\n")
    write_audio(ljspeech / "wavs" / "LJ007.wav", seconds=2.0, freq=900)  # same text as LJ000: duplicate
    first = _prep(ljspeech, out)
    assert first.rejected["too_short"] == 1 and first.rejected["duplicate_text"] == 1
    assert not (out / "wavs" / "LJ007.wav").exists()
    again = _prep(ljspeech, out)
    assert again.processed == 0 and again.rejected == first.rejected
    # Fix the duplicate's transcript: its parked WAV is used without decoding it again.
    text = (ljspeech / "metadata.csv").read_text(encoding="utf-8").replace(f"LJ007|{SENTENCES[0]}", f"LJ007|{SENTENCES[12]}")
    (ljspeech / "metadata.csv").write_text(text, encoding="utf-8")
    fixed = _prep(ljspeech, out)
    assert (fixed.processed, fixed.kept) == (0, 7)
    assert (out / "wavs" / "LJ007.wav").is_file()


def test_output_format_is_bounded(ljspeech: Path, tmp_path: Path):
    out = tmp_path / "out"
    cfg = dict(eval_fraction=0.5, min_duration_s=1.0, max_duration_s=5.0, max_text_chars=40)
    report = _prep(ljspeech, out, **cfg)
    for name in ("metadata_train.csv", "metadata_eval.csv"):
        lines = (out / name).read_bytes().decode("utf-8").split("\n")
        assert lines[0] == "audio_file|text|speaker_name" and lines[-1] == ""
        for line in lines[1:-1]:
            audio, text, speaker = line.split("|")  # exactly three fields
            assert audio.startswith("wavs/") and audio.endswith(".wav") and not os.path.isabs(audio)
            assert 0 < len(text) <= cfg["max_text_chars"] and text == text.strip() and speaker == "speaker"
            info = sf.info(str(out / audio))
            assert (info.samplerate, info.channels, info.subtype, info.format) == (22050, 1, "PCM_16", "WAV")
            assert cfg["min_duration_s"] <= info.duration <= cfg["max_duration_s"]
            assert 3.0 <= len(text) / info.duration <= 30.0
    rows = _rows(out)
    assert len(rows) == report.kept == 6 and all(os.path.isabs(r["audio_file"]) for r in rows)
    data = json.loads((out / "report.json").read_text(encoding="utf-8"))
    for key in ("kept", "kept_train", "kept_eval", "rejected", "hours", "speakers", "examples",
                "duration_stats", "chars_per_second_stats", "speaker_detail"):
        assert key in data
    assert report.summary_lines()[1].startswith("Kept 6 of 6 clips")


def test_zero_kept_raises_with_path_and_top_reasons(tmp_path: Path):
    root = tmp_path / "ds"
    for i in range(3):
        write_audio(root / "wavs" / f"c{i}.wav", seconds=0.1, freq=300 + i * 50)
    (root / "metadata.csv").write_text("".join(f"c{i}|{SENTENCES[i]}\n" for i in range(3)), encoding="utf-8")
    with pytest.raises(DataError) as err:
        _prep(root, tmp_path / "out")
    msg = str(err.value)
    assert str(root.resolve()) in msg and "too_short 3" in msg and "\n" not in msg
    assert (tmp_path / "out" / "report.txt").is_file()  # the report is written before the error


def test_prepare_command_builds_and_checks_the_config(ljspeech: Path, tmp_path: Path):
    report = prepare_command(ljspeech, tmp_path / "out", "ljspeech", num_workers=1, eval_fraction=0.5,
                             normalizer=standin_normalize, progress=False)
    assert report.kept == 6 and report.kept_eval >= 1 and report.layout == "ljspeech"
    with pytest.raises(ConfigError, match="eval_fractoin: unknown key"):
        prepare_command(ljspeech, tmp_path / "o2", eval_fractoin=0.5, normalizer=standin_normalize)
    with pytest.raises(ConfigError, match="max_duration_s"):
        prepare_command(ljspeech, tmp_path / "o2", max_duration_s="long", normalizer=standin_normalize)
    with pytest.raises(UserError, match="not a folder"):
        prepare_command(tmp_path / "nope", tmp_path / "o2", normalizer=standin_normalize)


def test_output_folder_inside_the_dataset_is_not_read_as_data(tmp_path: Path):
    root = tmp_path / "ds"
    for i in range(3):
        write_audio(root / f"c{i}.wav", seconds=2.0, freq=300 + i * 50)
        (root / f"c{i}.txt").write_text(SENTENCES[i], encoding="utf-8")
    assert _prep(root, root / "prepared").kept == 3
    again = _prep(root, root / "prepared")
    assert (again.total, again.processed) == (3, 0)
    with pytest.raises(DataError, match="is the dataset folder itself"):
        _prep(root, root)


def test_the_run_normaliser_is_the_project_front_end(ljspeech: Path, tmp_path: Path, monkeypatch):
    seen = []

    class Normalized:
        def __init__(self, text):
            self.text = text

    def fake_normalize_text(text, *, fold_homophones):
        seen.append(fold_homophones)
        return Normalized(text.strip())

    monkeypatch.setattr(xtts_ft.text, "normalize_text", fake_normalize_text, raising=False)
    normalizer = make_normalizer(fold_homophones=True)
    report = prepare_dataset(make_cfg(ljspeech), tmp_path / "out", normalizer=normalizer, progress=False)
    assert report.kept == 6 and seen and all(seen)
