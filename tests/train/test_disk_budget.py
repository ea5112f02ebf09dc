"""The disk budget: what a run will write is estimated before training and refused in one line if it cannot fit."""

from __future__ import annotations

import pytest
from trainhelpers import small_config

from xtts_ft.errors import DiskSpaceError
from xtts_ft.train.disk_budget import GB, check_disk_budget, estimate_run_disk


def _gpt_bytes(gpt):
    weights = sum(t.numel() * t.element_size() for t in list(gpt.parameters()) + list(gpt.buffers()))
    trainable = sum(p.numel() * p.element_size() for p in gpt.parameters() if p.requires_grad)
    return weights, trainable


def test_estimate_counts_every_kept_checkpoint_with_its_optimizer_state(built_model, tmp_path):
    weights, trainable = _gpt_bytes(built_model.gpt)
    cfg = small_config(tmp_path / "run", checkpoint={"keep_last": 3, "keep_best": True})
    full = estimate_run_disk(cfg, built_model.gpt, run_dir=tmp_path / "run")
    assert full.full_checkpoint == weights + 2 * trainable and full.weights_checkpoint == weights
    assert full.checkpoints == 5 * full.full_checkpoint  # 3 kept + best + the one being written
    cfg.checkpoint.optimizer_state = "latest"
    slim = estimate_run_disk(cfg, built_model.gpt, run_dir=tmp_path / "run")
    assert slim.checkpoints == 2 * full.full_checkpoint + 4 * weights < full.checkpoints
    assert full.total == full.checkpoints + full.samples + full.export + full.caches


def test_a_budget_smaller_than_the_estimate_is_refused_in_one_line(built_model, tmp_path):
    cfg = small_config(tmp_path / "run", checkpoint={"keep_last": 3, "keep_best": True})
    estimate = estimate_run_disk(cfg, built_model.gpt, run_dir=tmp_path / "run")
    check_disk_budget(cfg, estimate, tmp_path, free_bytes=estimate.total)  # exactly enough: fine
    with pytest.raises(DiskSpaceError) as info:
        check_disk_budget(cfg, estimate, tmp_path, free_bytes=estimate.total - 1)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{tmp_path}: the run needs about {estimate.total / GB:.1f} GB")
    for setting in ("checkpoint.keep_last: 1", "checkpoint.keep_best: false", "checkpoint.optimizer_state: latest",
                    "run.output_dir on a larger disk"):
        assert setting in message


def test_training_stops_before_the_first_step_when_the_budget_is_too_small(trainer, tmp_path):
    run = tmp_path / "run"
    cfg = small_config(run, checkpoint={"disk_budget_gb": 0.001})
    with pytest.raises(DiskSpaceError, match=r"GB is checkpoint.disk_budget_gb .*lower it with checkpoint.keep_last"):
        trainer(cfg)
    assert not (run / "checkpoints").exists() and not (run / "metrics.jsonl").exists()
