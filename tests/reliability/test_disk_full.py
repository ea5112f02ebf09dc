"""Disk full while saving: reported in one line, the previous checkpoint stays the latest, nothing half-written.

The write error is simulated where a real one happens: ``OSError(ENOSPC)`` half way through writing
``training_state.pt``, or when the last file of the folder (``meta.json``) is written, on the Nth
save of a run. ``checkpoint.on_save_error: stop`` ends the run with ``TrainingStopped`` (exit code 3
on the command line); ``continue`` logs the error and trains on, and a later save succeeds. Either
way the failed save's staging folder is gone at once (its space is freed) and only complete,
verified checkpoint folders exist. A failed *final* save is an error even with ``continue``.
"""

from __future__ import annotations

import errno
import logging

import pytest

from tests.reliability.relhelpers import read_events, small_config, train_lines
from xtts_ft import checkpoint_record
from xtts_ft import checkpoint_store as ckpt
from xtts_ft.checkpoint_store import CheckpointStore
from xtts_ft.errors import TrainingStopped
from xtts_ft.layout import META_FILE, step_dir_name

ENOSPC = OSError(errno.ENOSPC, "No space left on device")


def fail_on_save(monkeypatch, nth: int, phase: str) -> list[int]:
    """Make the ``nth`` save (1-based) fail with ENOSPC in ``phase`` ("state" or "meta"); returns the call log."""
    calls: list[int] = []
    if phase == "state":
        real = ckpt.write_state

        def write_state(state, f):
            calls.append(state["step"])
            if len(calls) == nth:
                f.write(b"\x80\x02 the first bytes of a checkpoint")
                raise ENOSPC
            real(state, f)

        monkeypatch.setattr(ckpt, "write_state", write_state)
    else:
        real_atomic = checkpoint_record.atomic_write  # the record (meta.json) writes itself there

        def atomic_write(path, content, **kwargs):
            if path.name == META_FILE:
                calls.append(path.parent.name)
                if len(calls) == nth:
                    raise ENOSPC
            real_atomic(path, content, **kwargs)

        monkeypatch.setattr(checkpoint_record, "atomic_write", atomic_write)
    return calls


def assert_only_complete_checkpoints(run, steps: list[int]) -> None:
    assert [c.step for c in CheckpointStore.of_run(run).list()] == steps
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [step_dir_name(s) for s in steps]
    for c in CheckpointStore.of_run(run).list():
        assert CheckpointStore.load_state(c.folder).step == c.step


def stop_message(run, *, failed: int, previous: int) -> str:
    """What the run says when the save of step ``failed`` hits a full disk and step ``previous`` is intact."""
    return (
        f"could not write the checkpoint of step {failed} in {run / 'checkpoints'}: No space left on device; the "
        f"previous checkpoint ({run / 'checkpoints' / step_dir_name(previous)}) is intact; free disk space, then "
        f"rerun the same command to resume")


@pytest.mark.parametrize("phase", ["state", "meta"])
def test_stop_keeps_the_previous_checkpoint_and_a_rerun_resumes_from_it(trainer, monkeypatch, tmp_path, phase):
    run = tmp_path / "run"
    cfg = small_config(run, training={"max_steps": 6}, checkpoint={"every_steps": 2, "on_save_error": "stop"})
    fail_on_save(monkeypatch, nth=2, phase=phase)
    with pytest.raises(TrainingStopped) as err:
        trainer(cfg)
    assert str(err.value) == stop_message(run, failed=4, previous=2)
    assert err.value.exit_code == 3
    assert train_lines(run)[-1]["step"] == 4  # it stopped right there, cleanly
    assert_only_complete_checkpoints(run, [2])  # no staging folder, no half-written step_000004
    assert CheckpointStore.of_run(run).latest() == run / "checkpoints" / "step_000002"

    monkeypatch.undo()  # space freed; the same command again
    result = trainer(cfg)
    assert result.step == 6
    assert [r["checkpoint"] for r in read_events(run) if r["event"] == "resume"] == [str(run / "checkpoints" / "step_000002")]
    assert_only_complete_checkpoints(run, [4, 6])  # keep_last 2


@pytest.mark.parametrize("phase", ["state", "meta"])
def test_continue_logs_the_error_trains_on_and_a_later_save_succeeds(trainer, monkeypatch, tmp_path, caplog, phase):
    run = tmp_path / "run"
    cfg = small_config(run, training={"max_steps": 6},
                       checkpoint={"every_steps": 2, "keep_last": 3, "on_save_error": "continue"})
    calls = fail_on_save(monkeypatch, nth=1, phase=phase)
    caplog.set_level(logging.INFO)
    result = trainer(cfg)
    assert result.step == 6 and len(calls) == 3 and result.last_checkpoint == run / "checkpoints" / "step_000006"
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and "could not write" in r.getMessage()]
    assert errors == [f"could not write the checkpoint of step 2 in {run / 'checkpoints'}: No space left on device; no "
                      f"earlier checkpoint exists; training continues (checkpoint.on_save_error: continue)"]
    assert [r["step"] for r in train_lines(run)] == [1, 2, 3, 4, 5, 6]
    assert_only_complete_checkpoints(run, [4, 6])


def test_continue_still_stops_when_the_final_save_fails(trainer, monkeypatch, tmp_path):
    run = tmp_path / "run"
    cfg = small_config(run, training={"max_steps": 4}, checkpoint={"every_steps": 2, "on_save_error": "continue"})
    fail_on_save(monkeypatch, nth=2, phase="state")  # step 4 is the last step: nothing left to continue
    with pytest.raises(TrainingStopped) as err:
        trainer(cfg)
    assert str(err.value) == stop_message(run, failed=4, previous=2)
    assert_only_complete_checkpoints(run, [2])
