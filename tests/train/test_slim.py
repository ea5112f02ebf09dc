"""checkpoint.optimizer_state: latest - older and best checkpoints keep weights only, still verified and
loadable for export and evaluation, while resume continues from the latest full one."""

from __future__ import annotations

import logging

import torch

from tests.train.trainhelpers import read_events, small_config
from xtts_ft.checkpoint_store import CheckpointRecord, CheckpointStore
from xtts_ft.layout import STATE_FILE


def is_slim(folder) -> bool:
    return not CheckpointRecord.read(folder).optimizer_state


def _state(folder):
    return torch.load(folder / STATE_FILE, map_location="cpu", weights_only=True)


def test_older_checkpoints_keep_weights_only_and_resume_uses_the_latest_full_one(trainer, tiny_base, tmp_path,
                                                                                   caplog):
    from xtts_ft.evaluate import export_from_checkpoint
    from xtts_ft.inference.loading import load_checkpoint_folder

    run = tmp_path / "run"
    sections = dict(evaluation={"every_steps": 2},
                    checkpoint={"every_steps": 2, "keep_last": 2, "keep_best": True, "optimizer_state": "latest"})
    first = trainer(small_config(run, training={"max_steps": 6}, **sections))
    folders = [c.folder for c in CheckpointStore.of_run(run).list()]
    latest = first.last_checkpoint
    assert latest == folders[-1] and len(folders) >= 2
    assert "optimizer" in _state(latest) and not is_slim(latest)
    for folder in folders[:-1]:  # the older one and the best one (when it is not the latest)
        assert is_slim(folder) and CheckpointRecord.read(folder).to_json()["optimizer_state"] is False
        CheckpointStore.verify(folder)  # sha256 recomputed for the rewritten file
        state = _state(folder)
        assert "optimizer" not in state and state["gpt"] and state["step"] == CheckpointRecord.read(folder).step
        assert (folder / STATE_FILE).stat().st_size < (latest / STATE_FILE).stat().st_size / 2
        xtts, _, meta = load_checkpoint_folder(folder, tiny_base)  # what evaluate and synthesize load
        assert meta["step"] == state["step"]
        assert torch.equal(xtts.gpt.text_embedding.weight, state["gpt"]["text_embedding.weight"])
        out = export_from_checkpoint(folder, tmp_path / f"export_{folder.name}", tiny_base)
        assert (out / "model.pth").is_file()

    caplog.set_level(logging.WARNING)
    second = trainer(small_config(run, training={"max_steps": 8}, **sections))
    resumes = [e for e in read_events(run) if e["event"] == "resume"]
    assert resumes[-1]["checkpoint"] == str(latest) and resumes[-1]["step"] == 6
    assert "start afresh" not in caplog.text  # the latest kept its optimizer state
    assert "optimizer" in _state(second.last_checkpoint) and is_slim(latest)


def test_resuming_from_a_weights_only_checkpoint_by_name_restarts_the_optimizer(trainer, tmp_path, caplog):
    run = tmp_path / "run"
    sections = dict(checkpoint={"every_steps": 2, "keep_last": 2, "keep_best": False, "optimizer_state": "latest"})
    trainer(small_config(run, training={"max_steps": 4}, **sections))
    slim = run / "checkpoints" / "step_000002"
    assert is_slim(slim)
    caplog.set_level(logging.WARNING)
    result = trainer(small_config(tmp_path / "run2", training={"max_steps": 4},
                                  checkpoint={"every_steps": 2, "resume": str(slim)}))
    assert result.step == 4 and "AdamW's moments start afresh" in caplog.text
