"""Out of memory in the middle of a run: the micro-batch is split or its clip skipped, never the run lost."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn

from tests.train.trainhelpers import read_events, small_config, train_lines
from xtts_ft.checkpoint_store import CheckpointStore
from xtts_ft.errors import TrainingStopped
from xtts_ft.train.oom import MicroBatchRunner, split_batch


class Counters:
    oom_split = 0
    oom_skipped = 0


def _toy(n: int = 6):
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    batch = {"clips": torch.arange(n), "x": torch.randn(n, 3), "y": torch.randn(n), "position": (0, 0)}
    return model, batch


def _loss(model, piece):
    return ((model(piece["x"]).squeeze(-1) - piece["y"]) ** 2).mean()


def _reference_grads(model, batch, clips):
    model.zero_grad(set_to_none=True)
    keep = torch.tensor(clips)
    _loss(model, {"x": batch["x"][keep], "y": batch["y"][keep]}).backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return grads


def _runner(model, counters, recover=True):
    return MicroBatchRunner(counters=counters, device=torch.device("cpu"), recover=recover,
                            describe=lambda piece: ", ".join(f"clip_{i}" for i in piece["clips"].tolist()),
                            zero_grads=lambda: model.zero_grad(set_to_none=True))


def _forward(model, fails):
    def forward(piece):
        if fails(piece["clips"].tolist()):
            raise torch.cuda.OutOfMemoryError("injected: CUDA out of memory")  # the class torch raises on a GPU
        loss = _loss(model, piece)
        return loss, torch.stack([loss.detach()] * 3)

    return forward


def test_forward_oom_splits_into_halves_with_the_same_gradient_as_the_whole_batch():
    model, batch = _toy(6)
    expected = _reference_grads(model, batch, list(range(6)))
    counters = Counters()
    runner = _runner(model, counters)
    runner.begin()
    forward = _forward(model, lambda clips: len(clips) > 2)
    row = runner.run(batch, 1.0 / 6, forward, lambda loss: loss.backward(), step=0)
    assert runner.finish([p.grad for p in model.parameters()]) == 6
    assert counters.oom_split == 3 and counters.oom_skipped == 0  # 6 -> 3 + 3, each 3 -> 1 + 2
    for got, want in zip([p.grad for p in model.parameters()], expected):
        torch.testing.assert_close(got, want)
    torch.testing.assert_close(row[0], _loss(model, batch).detach())  # clip-weighted mean of the pieces' losses
    assert [e["event"] for e in runner.events] == ["oom_split"] * 3


def test_a_clip_that_never_fits_is_skipped_and_the_gradient_is_the_mean_over_the_rest(caplog):
    model, batch = _toy(6)
    expected = _reference_grads(model, batch, [0, 1, 2, 3, 5])
    counters = Counters()
    runner = _runner(model, counters)
    runner.begin()
    runner.run(batch, 1.0 / 6, _forward(model, lambda clips: 4 in clips), lambda loss: loss.backward(), step=7)
    assert runner.finish([p.grad for p in model.parameters()]) == 5
    # 6 -> 3 + [3 4 5]; [3 4 5] -> 3 + [4 5]; [4 5] -> 4 + 5
    assert counters.oom_skipped == 1 and counters.oom_split == 3
    for got, want in zip([p.grad for p in model.parameters()], expected):
        torch.testing.assert_close(got, want)
    assert "step 8: clip clip_4 does not fit even alone" in caplog.text


def test_backward_oom_clears_the_partial_gradients_of_the_window():
    model, batch = _toy(6)
    first = {k: (v[:3] if isinstance(v, torch.Tensor) else v) for k, v in batch.items()}
    second = {k: (v[3:] if isinstance(v, torch.Tensor) else v) for k, v in batch.items()}
    expected = _reference_grads(model, batch, [3, 4, 5])
    counters = Counters()
    runner = _runner(model, counters)
    calls = []

    def backward(loss):
        loss.backward()  # .grad now holds this piece's contribution, as after a backward that dies half way
        calls.append(len(calls) + 1)
        if len(calls) == 2:  # the second micro-batch's (whole) backward
            raise torch.OutOfMemoryError("injected in backward")

    runner.begin()
    forward = _forward(model, lambda clips: False)
    for micro in (first, second):  # two micro-batches of one optimizer step
        runner.run(micro, 1.0 / 6, forward, backward, step=0)
    assert calls == [1, 2, 3, 4] and runner.finish([p.grad for p in model.parameters()]) == 3
    assert counters.oom_skipped == 3 and counters.oom_split == 1  # clips 0-2 cleared; [3 4 5] split
    for got, want in zip([p.grad for p in model.parameters()], expected):
        torch.testing.assert_close(got, want)
    assert [e["event"] for e in runner.events] == ["oom_cleared", "oom_split"]


def test_nothing_fits_means_no_update_and_multi_gpu_stops_with_advice():
    model, batch = _toy(2)
    counters = Counters()
    runner = _runner(model, counters)
    runner.begin()
    assert runner.run(batch, 0.5, _forward(model, lambda clips: True), lambda loss: loss.backward(), step=0) is None
    assert runner.finish([p.grad for p in model.parameters()]) == 0 and counters.oom_skipped == 2
    assert all(p.grad is None for p in model.parameters())

    strict = _runner(model, Counters(), recover=False)
    strict.begin()
    with pytest.raises(TrainingStopped) as err:
        strict.run(batch, 0.5, _forward(model, lambda clips: True), lambda loss: loss.backward(), step=4)
    msg = str(err.value)
    assert "out of GPU memory at step 5" in msg and "clip_0, clip_1" in msg and "gradient_checkpointing" in msg
    assert "\n" not in msg


def test_split_batch_halves_every_tensor_and_trims_padding():
    batch = {"clips": torch.tensor([7, 8, 9]), "text_lengths": torch.tensor([2, 5, 3]),
             "padded_text": torch.ones(3, 5, dtype=torch.int32), "wav_lengths": torch.tensor([10, 4, 6]),
             "wav": torch.ones(3, 1, 10), "position": (1, 2)}
    a, b = split_batch(batch)
    assert a["clips"].tolist() == [7] and b["clips"].tolist() == [8, 9] and a["position"] == b["position"] == (1, 2)
    assert a["padded_text"].shape == (1, 2) and b["padded_text"].shape == (2, 5)
    assert a["wav"].shape == (1, 1, 10) and b["wav"].shape == (2, 1, 6)


def _weights(model) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).clone() for p in model.gpt.parameters()])


def test_out_of_memory_mid_run_does_not_kill_the_run(trainer, model_factory, tmp_path, caplog):
    """Step 2: forward OOM on 2 clips (split); 3: every clip (no update); 4: a clip alone; 5: backward OOM."""
    box, seen, state = [], {}, {"step": -1, "calls": 0, "backwards": 0}

    def inject(step):
        seen[step] = _weights(box[0])
        state.update(step=step, calls=0, backwards=0)
        return None

    def factory(*args):
        model = model_factory(*args)

        def before_forward(_module, args):
            state["calls"] += 1
            step, n = state["step"], args[0].shape[0]
            if (step == 1 and n > 1) or step == 2 or (step == 3 and state["calls"] <= 2):
                raise torch.OutOfMemoryError("injected: CUDA out of memory")

        def on_grad(grad):
            state["backwards"] += 1
            if state["step"] == 4 and state["backwards"] == 2:  # the second micro-batch's backward
                raise torch.OutOfMemoryError("injected in backward")
            return grad

        model.gpt.register_forward_pre_hook(before_forward)
        model.gpt.text_embedding.weight.register_hook(on_grad)
        box.append(model)
        return model

    caplog.set_level("WARNING")
    run = tmp_path / "run"
    cfg = small_config(run, training={"max_steps": 6, "grad_accum_steps": 2})
    result = trainer(cfg, model_factory=factory, fault_injector=inject)
    assert result.step == 6
    lines = {r["step"]: r for r in train_lines(run)}
    assert [lines[s]["oom_split"] for s in range(1, 7)] == [0, 2, 4, 5, 6, 6]
    assert [lines[s]["oom_skipped"] for s in range(1, 7)] == [0, 0, 4, 5, 7, 7]
    assert lines[3]["loss"] is None and all(math.isfinite(lines[s]["loss"]) for s in (1, 2, 4, 5, 6))
    assert lines[6]["skipped_steps"] == 0  # out of memory is not a non-finite step
    assert torch.equal(seen[2], seen[3]) and not torch.equal(seen[3], seen[4])  # step 3 (nothing fit): no update
    assert torch.isfinite(_weights(box[0])).all()
    events = [e for e in read_events(run) if e["event"].startswith("oom_")]
    assert [e["event"] for e in events].count("oom_skip") == 5 and any(e["event"] == "oom_cleared" for e in events)
    assert "does not fit even alone" in caplog.text and "clip_" in caplog.text
    state_dict = CheckpointStore.load_state(result.last_checkpoint)
    sampler = state_dict.sampler
    assert sampler["batch_index"] + 6 * sampler["epoch"] == 12  # 2 micro-batches per step, as without the errors
    assert state_dict.stability["oom_split"] == 6 and state_dict.stability["oom_skipped"] == 7  # saved for resume
