"""The pre-flight under fp16 (T4, V100): new-row gradients that underflow, and rows that truly get none.

A random model's text logits are flat; a trained model's are peaked, and the loss gradient reaching
a non-target row (about text-loss weight x p / tokens) then falls below fp16's smallest subnormal.
Multiplying the tiny model's ``gpt.text_head.weight`` by 30 peaks its logits the same way; before
the fix the pre-flight stopped such an fp16 run with "no gradient reaches the new token rows".
"""

from __future__ import annotations

import logging
import math

import pytest
import torch
import torch.nn.functional as F

from tests.train.trainhelpers import small_config, train_lines
from xtts_ft.errors import TrainingStopped


def _sharpened(model_factory, edit=None):
    def factory(*args):
        model = model_factory(*args)
        with torch.no_grad():  # both heads peaked, as a trained model's are (NOTES: every fp16 test)
            model.gpt.text_head.weight.mul_(30.0)
            model.gpt.mel_head.weight.mul_(30.0)
        if edit is not None:
            edit(model)
        return model

    return factory


def test_fp16_preflight_passes_a_peaked_head_whose_new_rows_underflow(trainer, model_factory, tmp_path, caplog):
    run = tmp_path / "run"
    cfg = small_config(run, training={"max_steps": 1}, precision={"mode": "fp16"})
    with caplog.at_level(logging.INFO, logger="xtts_ft.train.preflight"):
        result = trainer(cfg, model_factory=_sharpened(model_factory))
    line = train_lines(run)[0]
    assert result.step == 1 and line["precision"] == "fp16" and line["skipped_steps"] == 0
    assert math.isfinite(line["loss"]) and line["loss_scale"] == 1024.0
    # the case of the issue really occurred: some new rows got exactly 0 from the scaled loss
    underflow = [r.getMessage() for r in caplog.records if "get a gradient of exactly 0" in r.getMessage()]
    assert underflow and "at loss scale 1024" in underflow[0], [r.getMessage() for r in caplog.records]
    assert any("gradients reach the 3 new token rows" in r.getMessage() for r in caplog.records)


def _detach_new_head_rows(model) -> None:
    head, first = model.gpt.text_head, model.gpt.text_head.weight.shape[0] - 3

    def forward(x):  # the new rows enter the logits as constants: no gradient can reach them
        weight = torch.cat([head.weight[:first], head.weight[first:].detach()])
        return F.linear(x, weight, head.bias)

    head.forward = forward


def _freeze_head(model) -> None:
    model.gpt.text_head.weight.requires_grad_(False)


@pytest.mark.parametrize("edit", [_detach_new_head_rows, _freeze_head], ids=["detached", "frozen"])
def test_fp16_preflight_still_refuses_new_head_rows_that_get_no_gradient(trainer, model_factory, tmp_path, edit):
    cfg = small_config(tmp_path / "run", precision={"mode": "fp16"})
    with pytest.raises(TrainingStopped, match=r"no gradient reaches the new token rows \(ids >= \d+\) of xtts\.gpt\."
                                              r"text_head"):
        trainer(cfg, model_factory=_sharpened(model_factory, edit))
