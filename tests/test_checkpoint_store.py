"""CheckpointStore: the one record of meta.json, best by metric, retention in one pass, staging clean-up, checksums.

Every checkpoint here is real (written by the store, verifying) but holds an empty GPT, so no model is built.
"""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from xtts_ft.checkpoint_store import (
    CheckpointRecord,
    CheckpointStore,
    RetentionPlan,
    RetentionPolicy,
    is_better,
    score_of,
)
from xtts_ft.config import CheckpointConfig
from xtts_ft.errors import CheckpointError
from xtts_ft.layout import RunLayout
from xtts_ft.tempfiles import staging_sibling
from xtts_ft.training_state import TrainingState

FORMAT1 = Path(__file__).resolve().parent / "assets" / "checkpoint_format1" / "step_000002"

ROWS = [  # step, eval loss, metrics
    (100, 2.0, {"sample_cer": 0.90, "sample_speaker_similarity": 0.80}),
    (200, 1.5, {"sample_cer": 0.30, "sample_speaker_similarity": 0.40}),  # lowest CER, poor voice
    (300, 1.2, {"sample_cer": 0.35, "sample_speaker_similarity": 0.90}),  # best combination
    (400, 1.0, {"sample_cer": 0.60, "sample_speaker_similarity": 0.85}),  # lowest loss, says less
    (500, float("nan"), {"sample_cer": float("nan"), "sample_speaker_similarity": 0.99}),  # overflowed: never best
    (600, None, None),  # not evaluated at this step: never best
]


def _save(store: CheckpointStore, step: int, eval_loss=None, metrics=None, *, run_id="r1") -> Path:
    vocab = store.root.parent / "vocab.json"
    if not vocab.is_file():
        vocab.parent.mkdir(parents=True, exist_ok=True)
        vocab.write_text("{}", encoding="utf-8")
    state = TrainingState(step=step, epoch=0, gpt={}, sampler={}, rng=[], stability={}, lr_factor=1.0,
                          precision="fp32", training_config={}, vocab_fingerprint="fp", base_vocab_size=0,
                          optimizer={"state": {}, "param_groups": [{"lr": 1e-5, "params": list(range(64))}]})
    return store.save(state, vocab_path=vocab, write_config=lambda p: p.write_text("{}\n", encoding="utf-8"),
                      run_id=run_id, base_model="/base", eval_loss=eval_loss, eval_metrics=metrics)


@pytest.fixture
def scored_run(tmp_path):
    store = CheckpointStore(RunLayout(tmp_path / "run"))
    for step, loss, metrics in ROWS:
        _save(store, step, loss, metrics)
    return store


def test_a_record_round_trips_and_the_old_format_still_reads(tmp_path):
    store = CheckpointStore(RunLayout(tmp_path))
    folder = _save(store, 7, 1.25, {"sample_cer": 0.5})
    record = CheckpointRecord.read(folder)
    assert (record.step, record.run_id, record.eval_loss, record.optimizer_state, record.base_model) == \
        (7, "r1", 1.25, True, "/base")
    record.write(tmp_path)
    assert CheckpointRecord.read(tmp_path) == record

    old = CheckpointRecord.read(FORMAT1)  # written by this project before the record existed
    raw = json.loads((FORMAT1 / "meta.json").read_text(encoding="utf-8"))
    assert (old.step, old.run_id, old.optimizer_state, old.eval_loss) == (2, raw["run_id"], False, raw["eval_loss"])
    assert old.to_json() == {**raw, "eval_pending": False}  # every key carried over, nothing renamed
    assert CheckpointStore.load_state(FORMAT1).step == 2
    unknown = CheckpointRecord.from_json({**raw, "written_by_a_newer_version": [1]}, "x")
    assert unknown.to_json()["written_by_a_newer_version"] == [1]


def test_a_damaged_record_is_one_line_naming_the_folder(tmp_path):
    folder = _save(CheckpointStore(RunLayout(tmp_path)), 3)
    (folder / "meta.json").write_text("{\"step\": ", encoding="utf-8")
    with pytest.raises(CheckpointError) as err:
        CheckpointRecord.read(folder)
    assert str(folder) in str(err.value) and "\n" not in str(err.value)
    (folder / "meta.json").write_text("{\"run_id\": \"r1\"}", encoding="utf-8")
    with pytest.raises(CheckpointError, match=f"^{folder}.*no step number"):
        CheckpointRecord.read(folder)


def test_best_follows_each_metric_and_nan_or_missing_is_never_best(scored_run):
    assert scored_run.best("eval_loss").name == "step_000400"
    assert scored_run.best("cer").name == "step_000200"
    # 0.30 + 0.5 * 0.60 = 0.60 against 0.35 + 0.5 * 0.10 = 0.40
    assert scored_run.best("cer_similarity").name == "step_000300"
    assert score_of("eval_loss", {"eval_loss": math.nan}) is None and score_of("cer", {"eval_loss": 1.0}) is None
    assert score_of("cer_similarity", {"sample_cer": 0.2, "sample_speaker_similarity": 0.6}) == pytest.approx(0.4)
    assert score_of("tail_rate", {"sample_tail_rate": 0.25, "sample_cer": 0.1}) == 0.25  # fewer that kept talking
    assert is_better("tail_rate", {"sample_tail_rate": 0.0}, {"sample_tail_rate": 0.5})
    # the trainer's in-memory best uses the same rule
    assert is_better("eval_loss", 1.0, None) and is_better("eval_loss", 1.0, 2.0) and not is_better("eval_loss", 2.0, 1.0)
    assert not is_better("eval_loss", math.nan, None) and not is_better("cer", None, 0.5)
    assert is_better("cer", {"sample_cer": 0.1}, {"sample_cer": 0.2}) and not is_better("cer", 0.2, 0.2)
    with pytest.raises(ValueError):
        score_of("wer", {"eval_loss": 1.0})
    assert CheckpointStore(RunLayout(scored_run.root.parent.parent / "empty")).best("eval_loss") is None


def test_retention_keeps_best_and_last_n_and_slims_the_rest_in_one_pass(scored_run, tmp_path):
    ours = scored_run
    theirs = _save(ours, 50, 0.1, {"sample_cer": 0.0}, run_id="another-run")  # better on paper, not ours
    damaged = _save(ours, 450, 0.5)
    with open(damaged / "training_state.pt", "r+b") as f:
        f.write(b"garbage")
    store = CheckpointStore(ours.root, owner=lambda record: record is not None and record.run_id == "r1")

    outcome = store.apply_retention(RetentionPolicy(keep_last=2, keep_best=True, metric="cer", slim=True))

    names = sorted(p.name for p in store.root.iterdir())
    assert names == ["step_000050", "step_000200", "step_000450", "step_000500", "step_000600"], names
    assert sorted(p.name for p in outcome.removed) == ["step_000100", "step_000300", "step_000400"]
    assert sorted(p.name for p in outcome.slimmed) == ["step_000200", "step_000500"]
    assert outcome.damaged == [damaged]  # left for the user, not counted as one of the last two
    for name, full in (("step_000200", False), ("step_000500", False), ("step_000600", True), ("step_000050", True)):
        state = CheckpointStore.load_state(store.root / name)  # every kept one still verifies
        assert (state.optimizer is not None) is full and CheckpointRecord.read(store.root / name).optimizer_state is full
    assert CheckpointRecord.read(theirs).run_id == "another-run"
    again = store.apply_retention(RetentionPolicy(keep_last=2, keep_best=True, metric="cer", slim=True))
    assert again.removed == [] and again.slimmed == []  # a second pass has nothing left to do


def test_clean_staging_removes_only_dead_writers_folders(tmp_path):
    store = CheckpointStore(RunLayout(tmp_path))
    _save(store, 2)
    dead = subprocess.Popen([sys.executable, "-c", ""])
    dead.wait()  # its pid now names no process
    live = staging_sibling(store.root / "step_000004", "new")  # this process's own save in progress
    host = live.name.split(".new-", 1)[1].rsplit("-", 1)[0]
    leftovers = [store.root / f".step_000004.new-{host}-{dead.pid}",  # a save killed half way
                 store.root / f".step_000002.trash-{host}-{dead.pid}",  # a removal killed half way
                 store.root / f".tmp_step_000006_{dead.pid}"]  # the name saves used before staging_sibling
    other_host = store.root / f".step_000008.new-elsewhere-{dead.pid}"  # its pid means nothing here
    for folder in [live, other_host, *leftovers]:
        folder.mkdir()
    removed = store.clean_staging()
    assert sorted(removed) == sorted(leftovers)
    assert sorted(p.name for p in store.root.iterdir()) == sorted([live.name, other_host.name, "step_000002"])


def test_a_corrupt_training_state_is_refused_in_one_line_naming_the_folder(tmp_path):
    store = CheckpointStore(RunLayout(tmp_path))
    good = _save(store, 2)
    bad = _save(store, 4)
    data = bytearray((bad / "training_state.pt").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (bad / "training_state.pt").write_bytes(bytes(data))
    for read in (CheckpointStore.verify, CheckpointStore.load_state, CheckpointStore.load_gpt_weights):
        with pytest.raises(CheckpointError) as err:
            read(bad)
        assert str(bad) in str(err.value) and "checksum mismatch" in str(err.value) and "\n" not in str(err.value)
    assert store.latest() == good  # auto-resume falls back to the previous good one
    no_sum = dataclasses.replace(CheckpointRecord.read(good), state_sha256=None)
    no_sum.write(good)
    with pytest.raises(CheckpointError, match="lacks training_state_sha256"):
        CheckpointStore.verify(good)


def test_what_a_folder_is_has_one_definition_that_the_config_shares(tmp_path):
    both = _save(CheckpointStore(RunLayout(tmp_path / "run")), 2)
    record_only, state_only, neither = tmp_path / "record_only", tmp_path / "state_only", tmp_path / "neither"
    for folder in (record_only, state_only, neither):
        folder.mkdir()
    (record_only / "meta.json").write_bytes((both / "meta.json").read_bytes())
    (state_only / "training_state.pt").write_bytes((both / "training_state.pt").read_bytes())  # a coqui-style folder
    assert [CheckpointStore.is_checkpoint(f) for f in (both, record_only, state_only, neither)] == [True, True, False, False]
    assert [CheckpointStore.holds_weights(f) for f in (both, record_only, state_only, neither)] == [True, False, True, False]
    # the config's check of checkpoint.resume (below the store, in the foundation) asks the same function
    for folder, refused in ((both, False), (record_only, False), (state_only, True)):
        problems: list[str] = []
        CheckpointConfig(resume=str(folder)).check(problems)
        assert bool(problems) is refused, (folder, problems)
    assert "is not a checkpoint folder (it has no meta.json)" in problems[0]


def test_step_folders_lists_every_step_named_folder_and_list_only_finished_ones(tmp_path):
    store = CheckpointStore.of_run(tmp_path / "run")
    assert not store.exists() and store.step_folders() == {} and store.disk_bytes() == 0
    saved = [_save(store, step) for step in (10, 2)]
    unfinished = store.folder_of(30)  # a folder of that name without its record (e.g. copied by hand, half)
    unfinished.mkdir()
    (store.root / ".step_000040.new-host-1").mkdir()  # a staging folder is no step folder
    (store.root / "notes").mkdir()
    (store.root / "step_000050").write_text("a file, not a folder", encoding="utf-8")
    assert store.exists() and unfinished == tmp_path / "run" / "checkpoints" / "step_000030"
    assert store.step_folders() == {2: saved[1], 10: saved[0], 30: unfinished}
    assert list(store.step_folders()) == [2, 10, 30]  # oldest first
    assert [c.folder for c in store.list()] == [saved[1], saved[0]]  # only finished ones are checkpoints
    assert store.disk_bytes() == sum(p.stat().st_size for p in store.root.rglob("*") if p.is_file()) > 0
    # a checkpoint knows its run folder; a folder elsewhere has none
    assert CheckpointStore.run_dir_of(saved[0]) == (tmp_path / "run").resolve()
    assert CheckpointStore.run_dir_of(tmp_path / "run") is None


def test_move_aside_keeps_each_folder_whole_under_its_name(tmp_path):
    store = CheckpointStore.of_run(tmp_path / "run")
    for step in (2, 4, 6):
        _save(store, step, eval_loss=float(step))
    branch = CheckpointStore.of_run(tmp_path / "run" / "branches" / "b1")
    later = [c.folder for c in store.list() if c.step > 2]
    moved = store.move_aside(later, into=branch.root)
    assert moved == [branch.root / "step_000004", branch.root / "step_000006"]
    assert [c.step for c in store.list()] == [2] and [c.step for c in branch.list()] == [4, 6]
    assert [CheckpointStore.verify(p).eval_loss for p in moved] == [4.0, 6.0]  # records and states intact
    assert store.move_aside([], into=tmp_path / "empty") == [] and (tmp_path / "empty").is_dir()


def test_the_retention_plan_is_what_a_pass_does_and_what_the_disk_estimate_counts(scored_run):
    policy = RetentionPolicy(keep_last=2, keep_best=True, metric="cer", slim=True)
    good = [dataclasses.replace(c, record=CheckpointStore.verify(c.folder)) for c in scored_run.list()]
    plan = policy.plan(good)
    assert [c.step for c in plan.remove] == [100, 300, 400]  # 200 is the best by CER; 500 and 600 the last two
    assert [c.step for c in plan.slim] == [200, 500]  # the newest (600) keeps its optimizer state
    assert [c.step for c in policy.plan(good, latest=good[-2].folder).slim] == [200, 600]
    outcome = scored_run.apply_retention(policy)
    assert outcome.removed == [c.folder for c in plan.remove] and outcome.slimmed == [c.folder for c in plan.slim]
    assert RetentionPolicy(keep_last=1, keep_best=False).plan(good[:1]) == RetentionPlan([], [])
    # at the fullest moment of a save: the kept ones, the best, the one being written (all full) ...
    assert RetentionPolicy(keep_last=3, keep_best=True).peak_on_disk() == (5, 0)
    assert RetentionPolicy(keep_last=3, keep_best=False).peak_on_disk() == (4, 0)
    # ... or, slimmed, two full (the new latest and the previous one) and the rest weights only
    assert RetentionPolicy(keep_last=3, keep_best=True, slim=True).peak_on_disk() == (2, 4)
