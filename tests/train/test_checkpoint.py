"""Checkpoints: self-contained folders, weights_only loading, retention, interrupted saves, damaged files."""

from __future__ import annotations

import errno
import json
import logging

import pytest
import torch
import yaml

from tests.train.trainhelpers import read_events, read_metrics, small_config, train_lines
from xtts_ft import checkpoint_store as ckpt
from xtts_ft.checkpoint_store import CheckpointRecord, CheckpointStore, file_sha256
from xtts_ft.errors import CheckpointError, TrainingStopped
from xtts_ft.tokenizer.fingerprint import vocab_fingerprint
from xtts_ft.train.resume import check_compatible

STATE_KEYS = {"gpt", "optimizer", "scaler", "step", "epoch", "sampler", "rng", "stability", "lr_factor", "precision",
              "vocab_fingerprint", "training_config", "format"}


def test_every_checkpoint_is_self_contained_and_loads_weights_only(trainer, vocab, tiny_base, tmp_path):
    run = tmp_path / "run"
    cfg = small_config(run, training={"max_steps": 6}, evaluation={"every_steps": 2},
                       checkpoint={"every_steps": 2, "keep_last": 1, "keep_best": True})
    result = trainer(cfg)
    folders = [c.folder for c in CheckpointStore.of_run(run).list()]
    assert result.last_checkpoint == run / "checkpoints" / "step_000006" and result.last_checkpoint in folders
    assert result.best_checkpoint in folders and len(folders) <= 2  # keep_last 1 + the best
    evals = {r["step"]: r["eval_loss"] for r in read_metrics(run) if r.get("split") == "eval"}
    assert set(evals) == {2, 4, 6}
    assert CheckpointRecord.read(result.best_checkpoint).eval_loss == pytest.approx(min(evals.values()))
    assert not any(p.name.startswith(".") for p in (run / "checkpoints").iterdir())  # no staging left
    for folder in folders:
        assert {p.name for p in folder.iterdir()} == {"training_state.pt", "meta.json", "vocab.json", "config.yaml"}
        state = torch.load(folder / "training_state.pt", map_location="cpu", weights_only=True)  # plain data only
        assert STATE_KEYS <= set(state) and state["vocab_fingerprint"] == vocab_fingerprint(vocab[0])
        meta = json.loads((folder / "meta.json").read_text())
        assert meta["training_state_sha256"] == file_sha256(folder / "training_state.pt")
        assert meta["base_model"] == str(tiny_base.root) and meta["step"] == state["step"]
        assert (folder / "vocab.json").read_bytes() == vocab[0].read_bytes()
        assert yaml.safe_load((folder / "config.yaml").read_text())["training"]["max_steps"] == 6
        assert isinstance(state["rng"][0]["numpy"][1], list) and state["sampler"]["epoch"] == state["epoch"]
        assert CheckpointStore.load_state(folder).step == meta["step"]


def test_a_save_that_dies_half_way_leaves_the_previous_checkpoint_for_auto_resume(trainer, monkeypatch, tmp_path):
    run = tmp_path / "run"
    real_write = ckpt.write_state

    def dying_write(state, f):
        if state["step"] == 6:
            f.write(b"half a checkpoint")
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write(state, f)

    monkeypatch.setattr(ckpt, "write_state", dying_write)
    expected = r"could not write the checkpoint of step 6 .*No space left.*step_000003.*intact"
    with pytest.raises(TrainingStopped, match=expected):
        trainer(small_config(run))
    assert [c.step for c in CheckpointStore.of_run(run).list()] == [3]
    assert CheckpointStore.of_run(run).latest() == run / "checkpoints" / "step_000003"
    monkeypatch.setattr(ckpt, "write_state", real_write)
    result = trainer(small_config(run))  # checkpoint.resume: auto
    assert result.step == 6 and [c.step for c in CheckpointStore.of_run(run).list()] == [3, 6]
    assert [r for r in read_events(run) if r.get("event") == "resume"][0]["checkpoint"].endswith("step_000003")
    assert not any(p.name.startswith(".") for p in (run / "checkpoints").iterdir())


def test_on_save_error_continue_keeps_training_but_a_failed_final_save_is_an_error(trainer, monkeypatch, tmp_path, caplog):
    def full_disk(state, f):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ckpt, "write_state", full_disk)
    run = tmp_path / "run"
    with pytest.raises(TrainingStopped, match=r"checkpoint of step 4 .*No space left.*no earlier checkpoint exists"):
        trainer(small_config(run, training={"max_steps": 4}, checkpoint={"on_save_error": "continue"}))
    assert "could not write the checkpoint of step 3" in caplog.text and "training continues" in caplog.text
    assert train_lines(run)[-1]["step"] == 4  # trained past the failed save at step 3
    assert CheckpointStore.of_run(run).list() == []


def test_a_truncated_checkpoint_is_named_and_auto_resume_falls_back(trainer, tmp_path, caplog):
    run = tmp_path / "run"
    trainer(small_config(run))
    latest = run / "checkpoints" / "step_000006" / "training_state.pt"
    data = latest.read_bytes()
    latest.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"step_000006/training_state.pt: checksum mismatch"):
        CheckpointStore.load_state(latest.parent)
    caplog.set_level(logging.INFO)
    result = trainer(small_config(run, training={"max_steps": 8, "lr": 5e-4}))
    assert "skipping damaged checkpoint" in caplog.text and "falling back to the previous one" in caplog.text
    assert "training.lr: 0.001 -> 0.0005" in caplog.text and "training.max_steps: 6 -> 8" in caplog.text
    assert result.step == 8
    last = train_lines(run)[-1]
    assert last["step"] == 8 and last["lr"] == pytest.approx(5e-4)  # the new LR is honoured
    assert [r for r in read_events(run) if r.get("event") == "resume"][0]["checkpoint"].endswith("step_000003")


def test_another_vocabulary_or_model_shape_is_refused(trainer, vocab, built_model, tmp_path):
    run = tmp_path / "run"
    trainer(small_config(run, training={"max_steps": 3}))
    state = CheckpointStore.load_state(run / "checkpoints" / "step_000003")
    ours = vocab_fingerprint(vocab[0])
    check_compatible(state, run, vocab_fingerprint=ours, gpt=built_model.gpt)  # the same vocabulary: fine
    with pytest.raises(CheckpointError) as err:
        check_compatible(state, run, vocab_fingerprint="0123456789abcdef", gpt=built_model.gpt)
    message = str(err.value)
    assert ours in message and "0123456789abcdef" in message and "checkpoint.resume: never" in message
    state.gpt["text_head.bias"] = torch.zeros(7)
    with pytest.raises(CheckpointError, match=r"'text_head.bias' has shape \(7,\) in the checkpoint but \(146,\)"):
        check_compatible(state, run, vocab_fingerprint=ours, gpt=built_model.gpt)


def test_an_unreadable_training_state_is_named_not_a_traceback(monkeypatch, tmp_path):
    folder = tmp_path / "step_000003"
    folder.mkdir()
    (folder / "meta.json").write_text(json.dumps({"step": 3, "training_state_sha256": "0" * 64}), encoding="utf-8")
    (folder / "training_state.pt").write_bytes(b"state")

    def denied(path):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(ckpt, "file_sha256", denied)  # chmod cannot do this when the tests run as root
    with pytest.raises(CheckpointError, match=r"step_000003/training_state.pt: cannot be read \(Permission denied\); fix"):
        CheckpointStore.verify(folder)


def test_a_vocabulary_mismatch_names_the_tokenizer_settings_that_changed(tmp_path):
    from xtts_ft.config import dump_config
    from xtts_ft.train.resume import check_vocab

    folder = tmp_path / "step_000200"
    folder.mkdir()
    old = small_config(tmp_path / "run", text={"fold_homophones": True}, tokenizer={"extra_text_files": ["more.txt"]})
    dump_config(old, folder / "config.yaml")
    now = small_config(tmp_path / "run", text={"fold_homophones": False}, tokenizer={"extra_text_files": []})
    with pytest.raises(CheckpointError) as err:
        check_vocab("aaaa", folder, "bbbb", now)
    message = str(err.value)
    assert "trained with vocabulary aaaa, but the current vocab.json has fingerprint bbbb" in message
    assert 'text.fold_homophones: true -> false, tokenizer.extra_text_files: ["more.txt"] -> []' in message
    assert "set them back in your config to continue this run" in message and "\n" not in message
    (folder / "config.yaml").write_text(": not yaml [", encoding="utf-8")  # no hints, still the plain refusal
    with pytest.raises(CheckpointError, match=r"cannot continue: start a new run dir"):
        check_vocab("aaaa", folder, "bbbb", now)
