"""Two runs in one folder never lose a checkpoint of either (real training on the tiny model).

Seen before the run folder had an owner: ``--resume never`` next to another run's checkpoints let
retention delete the new run's checkpoints as soon as they were written (or overwrite the old
run's step of the same number, leaving the old latest as "latest"), and a damaged checkpoint
skipped by ``resume: auto`` made the next save prune the good one before it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.reliability.relhelpers import read_events, small_config
from xtts_ft.checkpoint_store import CheckpointRecord, CheckpointStore
from xtts_ft.errors import CheckpointError, RunFolderError
from xtts_ft.layout import STATE_FILE
from xtts_ft.run_folder import OLD_RUNS, claim_run_folder, read_record


def states(checkpoints_dir: Path) -> dict[str, str]:
    return {p.name: CheckpointStore.verify(p).state_sha256 for p in sorted(checkpoints_dir.iterdir())
            if p.name.startswith("step_")}


def test_a_second_run_in_the_folder_keeps_every_checkpoint_of_both(trainer, tmp_path):
    run = tmp_path / "run"
    first = small_config(run, training={"max_steps": 6}, checkpoint={"every_steps": 2, "keep_last": 2})
    trainer(first)
    run_a = read_record(run).run_id
    a_states = states(run / "checkpoints")
    assert sorted(a_states) == ["step_000004", "step_000006"]

    second = small_config(run, training={"max_steps": 4}, checkpoint={"every_steps": 2, "keep_last": 2,
                                                                        "resume": "never"})
    with pytest.raises(RunFolderError, match="checkpoint.resume: never starts a new run.*--archive-old-run"):
        trainer(second)
    assert states(run / "checkpoints") == a_states  # refused before anything was written

    claim_run_folder(run, fingerprint=None, resume="never", archive=True)  # what --archive-old-run does first
    result = trainer(second)
    run_b = read_record(run).run_id
    assert run_b != run_a and result.last_checkpoint == run / "checkpoints" / "step_000004"
    b_states = states(run / "checkpoints")
    assert sorted(b_states) == ["step_000002", "step_000004"]  # retention kept the new run's own
    (old,) = (run / OLD_RUNS).iterdir()
    assert states(old / "checkpoints") == a_states  # and the old run's, byte for byte
    assert all(CheckpointRecord.read(p).run_id == run_b for p in (run / "checkpoints").iterdir())

    # A checkpoint of run A copied back in: run B's latest, best and retention ignore it, and B's own save
    # of the same step moves it aside instead of overwriting it.
    shutil.copytree(old / "checkpoints" / "step_000006", run / "checkpoints" / "step_000006")
    assert CheckpointStore.of_run(run, read_record(run).owns).latest().name == "step_000004"
    more = small_config(run, training={"max_steps": 8}, checkpoint={"every_steps": 2, "keep_last": 2})
    trainer(more)
    resumes = [e for e in read_events(run) if e["event"] == "resume"]
    assert resumes[-1]["checkpoint"].endswith("step_000004")  # not run A's step 6
    assert sorted(states(run / "checkpoints")) == ["step_000006", "step_000008"]
    assert all(CheckpointRecord.read(p).run_id == run_b for p in (run / "checkpoints").iterdir())
    (foreign,) = [p for p in (run / OLD_RUNS).iterdir() if p.name.endswith("_foreign_checkpoints")]
    assert states(foreign) == {"step_000006": a_states["step_000006"]}


def test_a_damaged_checkpoint_never_takes_the_place_of_a_good_one(trained_run, trainer, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)  # checkpoints at steps 2 and 4, keep_last 3
    state = run / "checkpoints" / "step_000004" / STATE_FILE
    data = bytearray(state.read_bytes())
    data[len(data) // 2] ^= 1
    state.write_bytes(bytes(data))

    # resume: auto skips the damaged step 4, continues from step 2 and saves step 3 with keep_last 1
    trainer(small_config(run, training={"max_steps": 3}, checkpoint={"every_steps": 1, "keep_last": 1,
                                                                      "keep_best": False}))
    names = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert names == ["step_000003", "step_000004"]  # the good step 3 is kept; damaged step 4 left for inspection
    with pytest.raises(CheckpointError):
        CheckpointStore.verify(run / "checkpoints" / "step_000004")
    assert CheckpointStore.of_run(run).latest().name == "step_000003"


def test_evaluating_another_runs_checkpoint_is_refused(trained_run, tmp_path):
    from xtts_ft.evaluate.standalone import evaluate_run

    other = tmp_path / "other"
    claim_run_folder(other, fingerprint=None, resume="auto")
    cfg = small_config(other)
    foreign = trained_run / "checkpoints" / "step_000004"
    with pytest.raises(CheckpointError) as err:
        evaluate_run(cfg, foreign)
    msg = str(err.value)
    assert msg == (f"--checkpoint {foreign}: belongs to run {read_record(trained_run).run_id}, not to run "
                   f"{read_record(other).run_id} of {other}; evaluating it here would put its samples and report row "
                   f"into this run. Pass the --config of its own run (or a run.output_dir of its own)")
    assert not (other / "samples").exists()
