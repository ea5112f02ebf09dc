"""The Data tab's commands read the app's config (dataset.*, ingest.*, asr.model), and its refusals name what
the page offers (issue 31, item 3)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.ingest.ingesthelpers import build_recording, read_metadata
from xtts_ft.asr import SMALL_MODEL_DIR
from xtts_ft.errors import ConfigError, UserError
from xtts_ft.layout import OUTPUT_MARKER
from xtts_ft.webapp import dataset_view

DEMO_DATA = REPO_ROOT / "datasets" / "amharic_demo"


def _config(path: Path, **dataset) -> Path:
    lines = ["dataset:", "  path: datasets/not_made_yet"] + [f"  {k}: {v}" for k, v in dataset.items()]
    lines += ["asr:", f"  model: {SMALL_MODEL_DIR}", "  device: cpu", "ingest:", "  min_score: 0.3"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_the_data_tab_reads_the_apps_config_else_the_runs_own(tmp_path: Path):
    run = tmp_path / "run"
    assert dataset_view.data_config(None, run) is None  # nothing: the schema's defaults
    run.mkdir()
    (run / "config.yaml").write_text("dataset:\n  path: x\n", encoding="utf-8")
    assert dataset_view.data_config(None, run) == run / "config.yaml"
    assert dataset_view.data_config(tmp_path / "launch.yaml", run) == tmp_path / "launch.yaml"  # ui --config wins

    assert dataset_view.check_config("  ", tmp_path) is None
    (tmp_path / "c.yaml").write_text("{}\n", encoding="utf-8")
    assert dataset_view.check_config(" c.yaml ", tmp_path) == "c.yaml"  # relative to where the commands run
    with pytest.raises(ConfigError, match=r"config: 'nope.yaml' not found; name a YAML file"):
        dataset_view.check_config("nope.yaml", tmp_path)


def test_both_commands_carry_the_config():
    prepare = dataset_view.prepare_command("data ", "out", "coqui", "configs/demo.yaml")
    assert prepare[-2:] == ["--config", "configs/demo.yaml"] and prepare[3:6] == ["prepare", "--input", "data"]
    assert "--config" not in dataset_view.prepare_command("data", "out", "auto")
    ingest = dataset_view.ingest_command(["a.wav"], "out", "t.txt", None, "configs/demo.yaml")
    assert ingest[ingest.index("--config") + 1] == "configs/demo.yaml" and "--subtitles" not in ingest


def test_prepare_from_the_page_applies_the_configs_dataset_settings(tmp_path: Path):
    config = _config(tmp_path / "app.yaml", max_text_chars=25, eval_fraction=0.0)
    out = tmp_path / "prepared"
    command = dataset_view.prepare_command(str(DEMO_DATA), str(out), "coqui", str(config))
    log, code = list(dataset_view.stream_command(command, REPO_ROOT))[-1]
    assert code == 0, log
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    # the config's dataset.max_text_chars (25, not the default 250) rejected the longer sentences
    assert report["rejected"]["text_too_long"] > 20 and report["kept_eval"] == 0
    assert report["kept"] + report["rejected_total"] == 66


def test_ingest_from_the_page_uses_the_configs_recogniser_and_settings(tmp_path: Path):
    recording = build_recording(tmp_path / "book.wav", 2, pause_s=0.8)
    (tmp_path / "book.txt").write_text("\n".join(recording.sentences), encoding="utf-8")
    config = _config(tmp_path / "app.yaml", min_duration_s=1.0, speaker_name="page_reader")
    out = tmp_path / "ds"
    command = dataset_view.ingest_command([str(recording.path)], str(out), str(tmp_path / "book.txt"), None,
                                          str(config))
    log, code = list(dataset_view.stream_command(command, REPO_ROOT))[-1]
    # without the config, ingest looks for the real recogniser online and fails after its retries
    assert code == 0, log
    assert [r["speaker_name"] for r in read_metadata(out)] == ["page_reader"] * 2  # dataset.speaker_name applied


def test_a_taken_output_folder_is_refused_in_the_pages_words(tmp_path: Path):
    taken = tmp_path / "mine"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine\n", encoding="utf-8")
    for command in ("prepare", "ingest"):
        with pytest.raises(UserError) as err:
            dataset_view.check_out("mine", command, tmp_path)
        message = str(err.value)
        assert message.startswith("prepared output folder 'mine': holds 1 file(s) not written by this tool")
        assert "name another prepared output folder" in message
        assert "--" not in message  # no command-line flag the page does not have
    with pytest.raises(UserError, match="prepared output folder: empty"):
        dataset_view.check_out(" ", "prepare", tmp_path)
    (tmp_path / "afile").write_text("x", encoding="utf-8")
    with pytest.raises(UserError, match="'afile': is a file"):
        dataset_view.check_out("afile", "prepare", tmp_path)
    dataset_view.check_out("new_folder", "ingest", tmp_path)  # absent: fine
    marker = tmp_path / "prepared_before"
    marker.mkdir()
    (marker / OUTPUT_MARKER).write_text(json.dumps({"command": "prepare", "files": None}), encoding="utf-8")
    dataset_view.check_out("prepared_before", "prepare", tmp_path)  # prepare's own earlier output: updated in place
