"""A stop's save must fit in torchrun's 30 s before SIGKILL: estimated up front, measured per save, warned once."""

from __future__ import annotations

import functools
import logging

import torch

from tests.train.trainhelpers import small_config
from xtts_ft.train import loop as loop_module
from xtts_ft.train import save_time
from xtts_ft.train.save_time import SaveTimeCheck, checkpoint_bytes, measure_write_rate


def test_checkpoint_size_counts_weights_and_adamw_state():
    frozen, trainable = torch.zeros(10), torch.nn.Parameter(torch.zeros(5, 4))
    frozen.requires_grad_(False)
    assert checkpoint_bytes([frozen, trainable]) == 4 * (10 + 20) + 2 * 4 * 20


def test_the_write_rate_probe_leaves_nothing_behind(tmp_path):
    assert measure_write_rate(tmp_path, nbytes=8 * 2**20) > 0
    assert list(tmp_path.iterdir()) == []


def test_a_slow_disk_is_warned_about_before_the_first_save(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(save_time, "measure_write_rate", lambda folder: 100e6)  # 100 MB/s
    check = SaveTimeCheck(every_steps=1000)
    with caplog.at_level(logging.WARNING):
        assert check.estimate(1000, tmp_path) is None  # tiny checkpoints are not worth a probe
        assert check.estimate(int(5.5e9), tmp_path) == 55.0
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "expected to take 55 s" in warnings[0]
    assert "SIGKILL 30 s after SIGTERM" in warnings[0] and "checkpoint.every_steps (1000)" in warnings[0]


def test_a_measured_save_warns_once_and_a_fast_one_not_at_all(caplog):
    check = SaveTimeCheck(every_steps=200)
    with caplog.at_level(logging.WARNING):
        check.after_save(12.0, 3.0)
        assert not caplog.records
        check.after_save(25.0, 8.0)  # 25 s to write + the 8 s step a stop finishes first > 30 s
        check.after_save(40.0, 8.0)
    assert len(caplog.records) == 1 and "took 25 s to write" in caplog.records[0].getMessage()


def test_the_training_loop_times_its_saves(trainer, tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(loop_module, "SaveTimeCheck", functools.partial(SaveTimeCheck, limit_s=0.0))
    with caplog.at_level(logging.WARNING):
        trainer(small_config(tmp_path / "run", training={"max_steps": 3}))
    assert "the last checkpoint took" in caplog.text and "checkpoint.every_steps (3)" in caplog.text
