"""The run layout names each file once; the writers put their files where it says."""

from __future__ import annotations

from pathlib import Path

from xtts_ft.checkpoint_store import CheckpointStore
from xtts_ft.layout import RUN_OUTPUTS, CheckpointLayout, RunLayout, branch_dir_name, step_dir_name, step_of


def test_step_folder_names_round_trip():
    assert step_dir_name(500) == "step_000500" and step_of("step_000500") == 500
    assert step_of(step_dir_name(1234567)) == 1234567  # more steps than the padding still parse
    assert step_of(".tmp_step_000500_12") is None and step_of("step_5x") is None and step_of("old_runs") is None
    assert branch_dir_name("20260101-120000", 2) == "20260101-120000_after_step_000002"


def test_run_and_checkpoint_paths(tmp_path):
    run = RunLayout(str(tmp_path))
    assert run.root == tmp_path and run.metrics == tmp_path / "metrics.jsonl"
    assert run.samples_index == tmp_path / "samples" / "index.jsonl"
    assert (run.data_report, run.tokenizer_report, run.dvae_report) == (
        tmp_path / "data" / "report.json", tmp_path / "tokenizer" / "report.json", tmp_path / "dvae" / "report.json")
    assert run.vocab == tmp_path / "tokenizer" / "vocab.json" and run.codes_cache == tmp_path / "cache" / "dvae_codes"
    store = CheckpointStore.of_run(str(tmp_path))  # checkpoint folders: only the store builds their paths
    ckpt = CheckpointLayout(store.folder_of(20))
    assert ckpt.root == tmp_path / "checkpoints" / "step_000020" and ckpt.step == 20
    assert not hasattr(run, "checkpoints") and store.root == tmp_path / "checkpoints"
    assert [p.name for p in (ckpt.state, ckpt.meta, ckpt.vocab, ckpt.config)] == [
        "training_state.pt", "meta.json", "vocab.json", "config.yaml"]
    assert run.samples_at(20) == tmp_path / "samples" / "step_000020"
    names = ("samples", "metrics", "events", "report", "summary", "config", "run_file", "tensorboard", "exports",
             "branches")
    assert {Path(getattr(run, name)).name for name in names} | {store.root.name} == set(RUN_OUTPUTS)

