"""The pieces of the app that need no browser: the schema-built form, its loader check, text and dataset checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from xtts_ft.config import TrainingConfig
from xtts_ft.config.schema import field_help
from xtts_ft.errors import ConfigError, DataError
from xtts_ft.text_settings import TextSettings
from xtts_ft.webapp import dataset_view
from xtts_ft.webapp.speak import reading
from xtts_ft.webapp.train_form import check_form, config_values, form_fields, overrides_from_form

DEMO = REPO_ROOT / "configs" / "demo.yaml"


def test_form_is_built_from_the_schema():
    fields = {f.key: f for f in form_fields()}
    assert fields["training.lr"].help == field_help(TrainingConfig, "lr")
    assert fields["precision.mode"].choices == ("auto", "bf16", "fp16", "fp32")
    assert fields["training.lr"].choices is None


def test_form_values_come_from_the_config_and_only_changes_become_overrides(monkeypatch):
    monkeypatch.chdir(REPO_ROOT)
    fields = form_fields()
    values = config_values(DEMO, fields)
    assert values["training.lr"] == "0.001" and values["training.max_steps"] == "200"
    assert values["evaluation.every_steps"] == "100"
    assert overrides_from_form(values, DEMO, fields) == []
    changed = dict(values, **{"training.lr": "-1e-3"})
    assert overrides_from_form(changed, DEMO, fields) == ["training.lr=-1e-3"]


def test_form_check_gives_the_loaders_one_line_messages(monkeypatch, tmp_path: Path):
    monkeypatch.chdir(REPO_ROOT)
    run = tmp_path / "run"
    assert check_form(DEMO, run, []) is None
    msg = check_form(DEMO, run, ["training.lr=-0.001"])
    assert "training.lr: -0.001 is not a plausible learning rate" in msg and "Traceback" not in msg
    msg = check_form(DEMO, run, [f"dataset.path={tmp_path / 'nowhere'}"])
    assert f"dataset.path: folder '{tmp_path / 'nowhere'}' does not exist" in msg
    assert len(msg.splitlines()) == 1


def test_text_in_another_script_is_refused_in_one_line():
    settings = TextSettings(fold_homophones=True, char_limit=200)
    assert reading("በ2015 ሰላም።", settings) == "በሁለት ሺህ አስራ አምስት ሰላም."
    with pytest.raises(DataError, match=r"text: letters in a script the model does not read \(Cyrillic: 'Привет мир'\)"):
        reading("ሰላም Привет мир", settings)
    with pytest.raises(DataError, match="empty"):
        reading("   ", settings)


def test_dataset_folder_check_is_the_loaders(tmp_path: Path):
    dataset_view.check_dataset(str(REPO_ROOT / "datasets" / "amharic_demo"), "coqui")
    with pytest.raises(ConfigError, match=r"dataset.path: folder '.*nowhere' does not exist"):
        dataset_view.check_dataset(str(tmp_path / "nowhere"), "auto")


def test_dataset_report_of_a_prepared_folder(tmp_path: Path):
    (tmp_path / "report.json").write_text(
        '{"kept": 3, "kept_train": 2, "kept_eval": 1, "hours": 0.01, "rejected_total": 1, '
        '"rejected": {"too_short": 1, "silent": 0}, "speaker_detail": {"a": {"kept": 3, "train": 2, "eval": 1, '
        '"hours": 0.01}}, "duration_stats": {"min": 1.0, "max": 3.0}, "dataset": "' + str(tmp_path) + '"}')
    (tmp_path / "metadata_train.csv").write_text("audio_file|text|speaker_name\nwavs/x.wav|ሰላም|a\n")
    (tmp_path / "rejected.tsv").write_text("clip_id\treason\twhere\tdetail\nshort.wav\ttoo_short\tshort.wav\t0.2 s\n")
    (tmp_path / "short.wav").write_bytes(b"RIFF")
    text = dataset_view.report_markdown(tmp_path)
    assert "**3 clips kept**" in text and "| too_short | 1 |" in text and "silent" not in text and "| a | 3 |" in text
    assert dataset_view.random_kept_clip(tmp_path) == (tmp_path / "wavs" / "x.wav", "ሰላም")
    rows = dataset_view.rejected_clips(tmp_path)
    assert rows[0]["reason"] == "too_short" and dataset_view.rejected_audio(tmp_path, rows[0]) == tmp_path / "short.wav"


def test_prepare_runs_the_projects_command_with_its_progress(tmp_path: Path):
    out = tmp_path / "prepared"
    command = dataset_view.prepare_command(str(REPO_ROOT / "datasets" / "amharic_demo"), str(out), "coqui")
    steps = list(dataset_view.stream_command(command, REPO_ROOT))
    log, code = steps[-1]
    assert code == 0, log
    assert len(steps) > 2 and all(c is None for _, c in steps[:-1])  # lines arrive while it runs
    assert "**66 clips kept**" in dataset_view.report_markdown(out)
    clip, text = dataset_view.random_kept_clip(out, seed=1)
    assert clip.is_file() and text


def test_auth_option_is_user_colon_password():
    from xtts_ft.webapp.app import parse_auth

    assert parse_auth("me:se:cret") == ("me", "se:cret") and parse_auth(None) is None
    with pytest.raises(ConfigError, match="--auth: expected USER:PASS"):
        parse_auth("me")


def test_curves_come_from_metrics_jsonl_and_stay_light(tmp_path: Path):
    from xtts_ft.webapp import run_view

    lines = [{"step": i, "loss": 5.0 - i / 1000, "lr": 1e-3, "skipped_steps": 0} for i in range(1, 1001)]
    lines += [{"step": 500, "split": "eval", "eval_loss": 4.0, "sample_cer": 0.5}, {"step": 7}]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n{\"step\": 10")  # cut short
    points = run_view.curve_points(tmp_path)
    assert len(points["loss"]) == 1000 and points["eval_loss"] == [(500, 4.0)] and points["sample_cer"] == [(500, 0.5)]
    svg = run_view.curves_svg(tmp_path)
    assert svg.startswith("<svg") and 'id="curve-loss"' in svg
    import xml.etree.ElementTree as ET

    groups = {g.get("id"): g for g in ET.fromstring(svg).iter("{http://www.w3.org/2000/svg}g")}
    markers = list(groups["curve-loss"].iter("{http://www.w3.org/2000/svg}use"))  # what the browser test counts
    assert 300 <= len(markers) <= run_view.MAX_PLOTTED + 1
    assert len(list(groups["curve-eval_loss"].iter("{http://www.w3.org/2000/svg}use"))) == 1
    assert run_view.progress(tmp_path).step == 1000
