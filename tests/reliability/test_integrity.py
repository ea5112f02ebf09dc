"""Checkpoint integrity: the sha256 in meta.json is checked on every load; damage is named, never used.

A damaged ``training_state.pt`` (cut short, or one flipped bit with its size and mtime unchanged, as
bit rot leaves it) is a one-line ``CheckpointError`` naming the file wherever the checkpoint is
read: an explicit load or ``checkpoint.resume: PATH``, export and synthesis. ``checkpoint.resume:
auto`` skips it with a warning and continues from the previous good checkpoint.
"""

from __future__ import annotations

import json
import logging
import os

import pytest

from tests.reliability.relhelpers import copy_run, read_events, small_config
from xtts_ft.checkpoint_store import CheckpointStore, file_sha256
from xtts_ft.errors import CheckpointError
from xtts_ft.inference.checkpoint_folder import load_checkpoint_gpt_state
from xtts_ft.train.resume import choose_checkpoint


def truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def flip_one_bit(path):
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # bit rot changes neither size nor mtime


@pytest.mark.parametrize("damage", [truncate, flip_one_bit], ids=["truncated", "bit-flipped"])
def test_a_damaged_training_state_is_named_and_auto_resume_uses_the_previous_one(trained_run, tmp_path, damage, caplog):
    run = copy_run(trained_run, tmp_path / "run")
    latest = run / "checkpoints" / "step_000004"
    damage(latest / "training_state.pt")
    expected = (f"{latest / 'training_state.pt'}: checksum mismatch (file truncated or corrupted); delete {latest} or "
                f"resume from an earlier checkpoint")
    with pytest.raises(CheckpointError) as explicit:
        CheckpointStore.load_state(latest)
    assert str(explicit.value) == expected
    assert choose_checkpoint(str(latest), run) == latest  # an explicit path is never swapped for another one ...
    with pytest.raises(CheckpointError) as exported:
        load_checkpoint_gpt_state(latest)  # ... and export / synthesize refuse it the same way
    assert str(exported.value) == expected

    caplog.set_level(logging.WARNING)
    assert choose_checkpoint("auto", run) == run / "checkpoints" / "step_000002"
    assert f"skipping damaged checkpoint: {expected}; falling back to the previous one" in caplog.messages
    CheckpointStore.load_state(run / "checkpoints" / "step_000002")  # the fallback itself verifies and loads


def test_auto_resume_trains_on_from_the_previous_good_checkpoint(trained_run, trainer, tmp_path, caplog):
    run = copy_run(trained_run, tmp_path / "run")
    flip_one_bit(run / "checkpoints" / "step_000004" / "training_state.pt")
    caplog.set_level(logging.INFO)
    result = trainer(small_config(run, training={"max_steps": 6}, checkpoint={"every_steps": 2, "keep_last": 3}))
    assert result.step == 6 and "skipping damaged checkpoint" in caplog.text
    assert read_events(run)[-1]["event"] == "checkpoint"
    resumes = [r for r in read_events(run) if r["event"] == "resume"]
    assert [r["checkpoint"] for r in resumes] == [str(run / "checkpoints" / "step_000002")]
    for c in CheckpointStore.of_run(run).list():  # step 4 was trained again and its damaged folder replaced
        assert CheckpointStore.load_state(c.folder).step == c.step
    assert [c.step for c in CheckpointStore.of_run(run).list()] == [2, 4, 6]


def test_a_damaged_meta_json_is_named_and_skipped(trained_run, tmp_path, caplog):
    run = copy_run(trained_run, tmp_path / "run")
    latest = run / "checkpoints" / "step_000004"
    (latest / "meta.json").write_text('{"step": 4, "training_st', encoding="utf-8")  # cut short
    with pytest.raises(CheckpointError) as err:
        CheckpointStore.load_state(latest)
    assert str(err.value) == (f"{latest / 'meta.json'}: unreadable (Unterminated string starting at: line 1 column 13 "
                              f"(char 12)); the checkpoint is damaged, use an earlier one")
    caplog.set_level(logging.WARNING)
    assert choose_checkpoint("auto", run) == run / "checkpoints" / "step_000002"
    assert "skipping damaged checkpoint" in caplog.text

    (latest / "meta.json").write_text(json.dumps({"step": 4}), encoding="utf-8")  # no checksum recorded
    with pytest.raises(CheckpointError, match=r"meta.json: lacks training_state_sha256; the checkpoint is damaged"):
        CheckpointStore.verify(latest)


def test_a_checksum_valid_file_that_is_not_a_training_state_is_named(trained_run, tmp_path):
    run = copy_run(trained_run, tmp_path / "run")
    latest = run / "checkpoints" / "step_000004"
    state = latest / "training_state.pt"
    state.write_bytes(b"\x00" * 64)  # someone replaced the file and "fixed" the recorded checksum
    meta = json.loads((latest / "meta.json").read_text(encoding="utf-8"))
    meta["training_state_sha256"] = file_sha256(state)
    (latest / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    with pytest.raises(CheckpointError) as err:
        CheckpointStore.load_state(latest)
    assert str(err.value) == (f"{state}: refused to load: not a plain torch weights file (Unsupported operand 0); it "
                              f"is damaged or was written by something else, and nothing in it was run. Use the "
                              f"official file, or re-save the weights with torch.save")


def test_a_missing_training_state_is_named(trained_run, tmp_path, caplog):
    run = copy_run(trained_run, tmp_path / "run")
    latest = run / "checkpoints" / "step_000004"
    (latest / "training_state.pt").unlink()
    with pytest.raises(CheckpointError) as err:
        CheckpointStore.load_state(latest)
    assert str(err.value) == f"{latest / 'training_state.pt'}: missing; the checkpoint is incomplete, use an earlier one"
    assert choose_checkpoint("auto", run) == run / "checkpoints" / "step_000002"


def test_a_saved_checkpoint_has_the_layout_files(trained_run):
    from xtts_ft.layout import CheckpointLayout, RunLayout

    folders = [(c.step, c.folder) for c in CheckpointStore.of_run(trained_run).list()]
    assert [step for step, _ in folders] == [2, 4]
    for step, folder in folders:
        files = CheckpointLayout(CheckpointStore.of_run(trained_run).folder_of(step))
        assert folder == files.folder
        assert all(p.is_file() for p in (files.state, files.meta, files.vocab, files.config))
    run = RunLayout(trained_run)
    assert run.metrics.is_file() and run.events.is_file() and run.run_file.is_file()
