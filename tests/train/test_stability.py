"""Non-finite defence, rollbacks, the stop with a diagnosis, fp16 on CPU, and the precision fallback."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from tests.train.trainhelpers import read_events, small_config, train_lines
from xtts_ft.errors import TrainingStopped


def _capture(model_factory, box: list):
    def factory(*args):
        model = model_factory(*args)
        box.append(model)
        return model

    return factory


def _weights(model) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).clone() for p in model.gpt.parameters()])


def test_nan_loss_and_nan_grad_are_skipped_and_counted(trainer, model_factory, tmp_path):
    box, seen = [], {}

    def inject(step):
        seen[step] = _weights(box[0])  # weights at the start of each step
        return {1: "loss_nan", 3: "grad_nan"}.get(step)

    run = tmp_path / "run"
    result = trainer(small_config(run, training={"max_steps": 5}), model_factory=_capture(model_factory, box),
                     fault_injector=inject)
    assert result.step == 5
    lines = {r["step"]: r for r in train_lines(run)}
    assert lines[1]["skipped_steps"] == 0
    assert lines[2]["loss"] is None
    assert lines[2]["skipped_nonfinite_loss"] == 1 and lines[2]["skipped_nonfinite_grad"] == 0
    assert lines[4]["grad_norm"] is None and lines[4]["skipped_nonfinite_grad"] == 1 and lines[4]["skipped_steps"] == 2
    assert torch.equal(seen[1], seen[2]) and torch.equal(seen[3], seen[4])  # skipped steps changed nothing
    assert not torch.equal(seen[0], seen[1]) and not torch.equal(seen[2], seen[3])  # good steps did
    assert all(math.isfinite(_weights(box[0]).abs().max().item()) for _ in [0])


def test_consecutive_bad_steps_roll_back_and_lower_the_lr(trainer, tmp_path):
    calls = []

    def inject(step):
        calls.append(step)
        return "loss_nan" if 3 <= len(calls) - 1 <= 5 else None  # calls 3, 4, 5: three bad steps in a row

    run = tmp_path / "run"
    result = trainer(small_config(run, training={"max_steps": 6}), fault_injector=inject)
    assert result.step == 6
    events = [r for r in read_events(run) if r.get("event") == "rollback"]
    assert len(events) == 1 and events[0]["failed_at"] == 6 and events[0]["step"] == 2 and events[0]["lr_factor"] == 0.5
    assert calls == [0, 1, 2, 3, 4, 5, 2, 3, 4, 5]  # resumed from the snapshot at step 2
    lines = train_lines(run)
    assert lines[2]["lr"] == pytest.approx(1e-3) and lines[-1]["lr"] == pytest.approx(5e-4)
    assert lines[-1]["rollbacks"] == 1 and lines[-1]["skipped_nonfinite_loss"] == 3


def test_too_many_rollbacks_stop_with_the_module_that_went_non_finite(trainer, model_factory, tmp_path):
    box, poison = [], {"on": False}

    def factory(*args):
        model = model_factory(*args)
        target = model.gpt.gpt.h[1].mlp
        target.register_forward_hook(lambda _m, _a, out: out * float("inf") if poison["on"] else None)
        box.append(model)
        return model

    def inject(step):
        poison["on"] = step >= 2
        return None

    run = tmp_path / "run"
    with pytest.raises(TrainingStopped) as err:
        trainer(small_config(run, training={"max_steps": 20}), model_factory=factory, fault_injector=inject)
    msg = str(err.value)
    assert "module 'xtts.gpt.gpt.h.1.mlp' produced the first non-finite value" in msg
    assert "1 rollback(s)" in msg and "lower training.lr" in msg and "precision.mode: fp32" in msg and "clip_" in msg
    assert "\n" not in msg
    events = [r["event"] for r in read_events(run)]
    assert events.count("rollback") == 1 and events[-1] == "stopped"


def test_preflight_names_the_module_when_the_first_batch_is_non_finite(trainer, model_factory, tmp_path):
    def factory(*args):
        model = model_factory(*args)
        model.gpt.conditioning_encoder.register_forward_hook(lambda _m, _a, out: out * float("nan"))
        return model

    with pytest.raises(TrainingStopped, match=r"pre-flight: .*non-finite loss.*'xtts\.gpt\.conditioning_encoder"):
        trainer(small_config(tmp_path / "run"), model_factory=factory)


def test_preflight_refuses_new_rows_that_get_no_gradient(trainer, model_factory, tmp_path):
    def factory(*args):
        model = model_factory(*args)
        model.gpt.text_embedding.weight.register_hook(lambda g: torch.zeros_like(g))  # detached new rows
        return model

    with pytest.raises(TrainingStopped, match="no gradient reaches the new token rows .*text_embedding"):
        trainer(small_config(tmp_path / "run"), model_factory=factory)


def test_fp16_autocast_with_grad_scaler_runs_on_cpu(trainer, tmp_path):
    run = tmp_path / "run"
    result = trainer(small_config(run, training={"max_steps": 3}, precision={"mode": "fp16"}))
    lines = train_lines(run)
    assert result.step == 3 and all(r["precision"] == "fp16" and r["loss_scale"] == 1024.0 for r in lines)
    assert all(math.isfinite(r["loss"]) and r["skipped_steps"] == 0 for r in lines)


def test_collapsing_loss_scale_switches_the_run_to_a_safer_precision(trainer, tmp_path):
    run = tmp_path / "run"
    cfg = small_config(run, training={"max_steps": 6}, precision={"mode": "fp16", "min_scale": 300.0},
                       stability={"max_consecutive_bad_steps": 10})
    result = trainer(cfg, fault_injector=lambda step: "grad_nan" if step < 3 else None)
    assert result.step == 6
    lines = train_lines(run)
    assert [r["loss_scale"] for r in lines[:2]] == [1024.0, 512.0] and lines[0]["precision"] == "fp16"
    switch = [r for r in read_events(run) if r.get("event") == "precision_switch"]
    assert len(switch) == 1 and switch[0]["step"] == 2 and switch[0]["loss_scale"] == 256.0  # 512 * 0.5 < 300
    assert switch[0]["old"] == "fp16" and switch[0]["new"] == "fp32"  # CPU: no bf16 GPU to fall back to
    assert [r["precision"] for r in lines[2:]] == ["fp32"] * 4 and lines[-1]["skipped_steps"] == 3
    assert lines[-1]["loss_scale"] == 1.0 and math.isfinite(lines[-1]["loss"])


def test_collapsing_fp16_scale_switches_precision_with_the_default_settings(trainer, tmp_path):
    """Defaults: init scale 1024, back-off 0.5, min_scale 1, 10 bad steps per rollback, 3 rollbacks.

    fp16 gradients overflow on every step until the switch. The scale halves 1024 -> 2 over ten steps,
    the run rolls back once (weights and optimizer only), and the next overflow takes the kept scale
    below min_scale: the run switches to fp32 (CPU: no bf16) instead of rolling back until it stops.
    """
    from xtts_ft.config import PrecisionConfig, StabilityConfig

    run = tmp_path / "run"
    cfg = small_config(run, training={"max_steps": 12})  # skipped steps count: 10 to the rollback, 12 after it
    cfg = dataclasses.replace(cfg, precision=PrecisionConfig(mode="fp16"), stability=StabilityConfig())
    calls = []

    def overflow_until_switched(step):
        calls.append(step)
        return "grad_nan" if len(calls) <= 11 else None

    result = trainer(cfg, fault_injector=overflow_until_switched)
    assert result.step == 12 and len(calls) == 22
    lines = train_lines(run)
    assert [r["loss_scale"] for r in lines[:11]] == [1024.0 / 2**k for k in range(10)] + [1.0]
    events = [r for r in read_events(run) if r.get("event") in ("rollback", "precision_switch", "stopped")]
    assert [e["event"] for e in events] == ["rollback", "precision_switch"]
    assert events[0]["failed_at"] == 10 and events[1]["loss_scale"] == 0.5
    assert events[1]["old"] == "fp16" and events[1]["new"] == "fp32"
    assert [r["precision"] for r in lines[11:]] == ["fp32"] * 11 and all(math.isfinite(r["loss"]) for r in lines[11:])
