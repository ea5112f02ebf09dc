"""Evaluation feeds the model what training feeds it, and a non-finite eval loss is reported."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn as nn

from tests.train.trainhelpers import read_events, small_config
from xtts_ft.model import model_limits
from xtts_ft.train.data import ClipDataset, Limits, collate, eval_batches, load_clips
from xtts_ft.train.evaluation import eval_losses
from xtts_ft.train.precision import PrecisionPolicy
from xtts_ft.train.step import model_inputs as step_inputs


class Recorder(nn.Module):
    """The model, recording the keyword inputs of every forward call."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model, self.calls = model, []

    def forward(self, **inputs):
        self.calls.append({k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()})
        return self.model(**inputs)


@pytest.mark.parametrize("name", ["fp16", "bf16"])
def test_eval_inputs_equal_the_training_inputs_under_autocast(built_model, dataset, tokenizer, name):
    """Conditioning mels and DVAE codes (no code cache) come out of fp32, as in a training step."""
    limits = Limits(**model_limits(built_model.xtts))
    clips, _ = load_clips(dataset[1], tokenizer, "am", limits, progress=False)
    eval_set = ClipDataset(clips, sample_rate=limits.sample_rate, cond_min_s=0.4, cond_max_s=0.8, seed=0, train=False)
    batches = eval_batches(clips, 2, 2)
    model_inputs = lambda batch, train: step_inputs(built_model, torch.device("cpu"), batch, train=train)  # noqa: E731
    recorder = Recorder(built_model).eval()
    built_model.eval()
    try:
        eval_losses(recorder, eval_set, batches, PrecisionPolicy(name, "cpu").autocast, model_inputs)
    finally:
        built_model.train()
    assert len(recorder.calls) == len(batches) == 2
    for keys, seen in zip(batches, recorder.calls):
        expected = model_inputs(collate([eval_set[k] for k in keys]), train=False)  # built outside autocast
        assert seen["cond_mels"].dtype == torch.float32
        assert torch.equal(seen["cond_mels"], expected["cond_mels"])
        assert torch.equal(seen["audio_codes"], expected["audio_codes"])


def test_a_non_finite_eval_loss_is_reported_not_dropped(trainer, model_factory, tmp_path):
    def factory(*args):
        model = model_factory(*args)
        forward = model.forward

        def nan_in_eval(**inputs):
            out = forward(**inputs)
            return out if model.gpt.training else {k: v * float("nan") for k, v in out.items()}

        model.forward = nan_in_eval
        return model

    run = tmp_path / "run"
    result = trainer(small_config(run, training={"max_steps": 3}), model_factory=factory)
    events = [e for e in read_events(run) if e.get("event") == "eval_nonfinite"]
    assert [e["step"] for e in events] == [3] and events[0]["eval_loss"] == "nan"
    assert result.final_eval_loss is None
    meta = json.loads((run / "checkpoints" / "step_000003" / "meta.json").read_text())
    assert meta["eval_loss"] is None  # no older eval loss passed off as this step's
