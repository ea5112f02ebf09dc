"""resolve_model: an export, a checkpoint or a run folder (best checkpoint, else latest), or one clear line."""

from __future__ import annotations

import json

import pytest
import yaml

from xtts_ft.checkpoint_store import file_sha256
from xtts_ft.errors import ModelError
from xtts_ft.serve.model_source import resolve_model


def _checkpoint(run, step, eval_loss=None, run_id="r1"):
    folder = run / "checkpoints" / f"step_{step:06d}"
    folder.mkdir(parents=True)
    (folder / "training_state.pt").write_bytes(b"weights of step %d" % step)
    meta = {"step": step, "run_id": run_id, "eval_loss": eval_loss,
            "training_state_sha256": file_sha256(folder / "training_state.pt")}
    (folder / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    return folder


@pytest.fixture
def run(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump({"checkpoint": {"best_metric": "eval_loss"}}), encoding="utf-8")
    (run / "run.json").write_text(json.dumps({"run_id": "r1"}), encoding="utf-8")
    return run


def test_export_folder(tiny_export):
    r = resolve_model(tiny_export)
    assert (r.kind, r.loads_as, r.model_dir) == ("export", "export", tiny_export)
    assert "export" in r.describe()


def test_run_folder_serves_its_best_checkpoint(run):
    _checkpoint(run, 100, eval_loss=3.0)
    best = _checkpoint(run, 200, eval_loss=2.0)
    _checkpoint(run, 300, eval_loss=2.5)
    _checkpoint(run, 400, eval_loss=1.0, run_id="another-run")  # not this run's: never picked
    r = resolve_model(run)
    assert (r.kind, r.loads_as, r.model_dir, r.run_dir) == ("run", "checkpoint", best, run)
    assert r.chosen_by == "best (eval_loss)" and "step_000200" in r.describe()


def test_run_folder_without_scores_serves_its_latest_good_checkpoint(run):
    _checkpoint(run, 100)
    latest = _checkpoint(run, 200)
    damaged = _checkpoint(run, 300)
    (damaged / "training_state.pt").write_bytes(b"truncated")
    r = resolve_model(run)
    assert r.model_dir == latest and r.chosen_by == "latest"


def test_checkpoint_folder_knows_its_run(run):
    ckpt = _checkpoint(run, 100)
    r = resolve_model(ckpt, base_model="/some/base")
    assert (r.kind, r.model_dir, r.run_dir, r.base_model) == ("checkpoint", ckpt, run.resolve(), "/some/base")


@pytest.mark.parametrize("case", ["missing", "file", "empty", "run_without_checkpoints", "run_before_training"])
def test_anything_else_is_one_line_naming_the_folder(tmp_path, case):
    path = tmp_path / "model"
    if case == "file":
        path.write_text("x")
    elif case == "empty":
        path.mkdir()
    elif case == "run_without_checkpoints":
        (path / "checkpoints").mkdir(parents=True)
    elif case == "run_before_training":  # prepared, training started, no checkpoint saved (nor its folder) yet
        path.mkdir()
        (path / "run.json").write_text('{"run_id": "r1"}')
        (path / "config.yaml").write_text("run:\n  language: am\n")
    with pytest.raises(ModelError) as info:
        resolve_model(path)
    message = str(info.value)
    assert str(path) in message and "\n" not in message
    assert {"missing": "not found", "file": "is a file", "empty": "expected an export folder",
            "run_without_checkpoints": "a run folder with no checkpoint yet",
            "run_before_training": "a run folder with no checkpoint yet"}[case] in message
