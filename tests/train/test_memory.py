"""Memory options: batch_size auto (back-off, accumulation, worst-case probe), gradient checkpointing (same
loss and gradients), frozen modules kept on the CPU, and length bucketing (fewer padded frames)."""

from __future__ import annotations

import contextlib
import copy
import functools
import math

import numpy as np
import pytest
import torch

from tests.train.trainhelpers import small_config, train_lines
from xtts_ft.checkpoint_store import CheckpointStore
from xtts_ft.errors import TrainingStopped
from xtts_ft.train import loop as loop_module
from xtts_ft.train import memory, session
from xtts_ft.train.memory import (
    auto_batch_limit,
    enable_gradient_checkpointing,
    find_batch_size,
    modules_on,
    offload_plan,
    offloaded_tensor_names,
    place_modules,
    plan_accumulation,
)
from xtts_ft.train.sampler import ResumableBatchSampler

CPU = torch.device("cpu")


def _oom_above(threshold: int, tried: list):
    def try_batch(n: int) -> None:
        tried.append(n)
        if n > threshold:
            raise torch.cuda.OutOfMemoryError(f"injected: CUDA out of memory at batch {n}")

    return try_batch


def test_auto_batch_doubles_then_backs_off_by_binary_search_under_an_injected_oom():
    assert issubclass(torch.cuda.OutOfMemoryError, torch.OutOfMemoryError)  # what the finder catches
    tried = []
    choice = find_batch_size(_oom_above(11, tried), CPU, 64, probe=True)
    assert tried == [1, 2, 4, 8, 16, 12, 10, 11]  # double to the first failure, then bisect 8..16
    assert choice.largest_fit == 11 and choice.first_oom == 12
    assert choice.size == 9  # 90 % of 11, rounded down: the safety margin
    assert choice.tried[-3:] == [(12, False), (10, True), (11, True)]
    assert plan_accumulation(choice.size, 32, 1, 1, lower_batch=True) == (8, 4)  # 9 -> 4 steps -> 8 x 4 = 32

    tried = []
    small = find_batch_size(_oom_above(5, tried), CPU, 12, probe=True)
    assert tried == [1, 2, 4, 8, 6, 5] and (small.largest_fit, small.size) == (5, 4)

    tried = []
    roomy = find_batch_size(_oom_above(100, tried), CPU, 12, probe=True)
    assert tried == [1, 2, 4, 8, 12] and roomy.size == 12 and roomy.first_oom is None  # no failure: no margin


def test_auto_batch_refuses_when_one_clip_does_not_fit_and_lets_other_errors_through():
    with pytest.raises(TrainingStopped) as err:
        find_batch_size(_oom_above(0, []), CPU, 64, probe=True)
    msg = str(err.value)
    assert "even one clip" in msg and "gradient_checkpointing" in msg and "\n" not in msg

    def broken(n):
        raise RuntimeError("a real bug, not out of memory")

    with pytest.raises(RuntimeError, match="a real bug"):
        find_batch_size(broken, CPU, 8, probe=True)
    assert find_batch_size(broken, CPU, 8).size == 4  # on CPU nothing is probed


def test_effective_batch_sets_the_accumulation():
    assert plan_accumulation(10, None, 1, 8, lower_batch=True) == (10, 8)  # null: grad_accum_steps as given
    assert plan_accumulation(10, 32, 1, 8, lower_batch=False) == (10, 4)  # fixed batch: 40 clips per step
    assert plan_accumulation(6, 32, 2, 1, lower_batch=True) == (6, 3)  # 6 x 3 x 2 GPUs = 36 >= 32
    assert plan_accumulation(64, 16, 1, 1, lower_batch=True) == (16, 1)
    assert auto_batch_limit(12, 1, None) == 12 and auto_batch_limit(500, 1, None) == 64
    assert auto_batch_limit(500, 2, 32) == 16


def test_auto_batch_probes_real_steps_at_the_longest_clip(trainer, model_factory, tmp_path, monkeypatch, caplog):
    """On CPU the probe is forced; the GPT 'runs out of memory' above 3 clips. A resume reuses the size."""
    monkeypatch.setattr(session, "probe_batch_size", functools.partial(memory.probe_batch_size, probe=True))
    shapes = []

    def factory(*args):
        model = model_factory(*args)

        def before_forward(_module, args):
            shapes.append((args[0].shape[0], tuple(args[1].tolist()), args[2].shape[1], tuple(args[3].tolist())))
            if args[0].shape[0] > 3:
                raise torch.OutOfMemoryError("injected: CUDA out of memory")

        model.gpt.register_forward_pre_hook(before_forward)
        return model

    caplog.set_level("INFO")
    run = tmp_path / "run"
    cfg = small_config(run, training={"max_steps": 1, "batch_size": "auto", "effective_batch_size": 8})
    result = trainer(cfg, model_factory=factory)
    probes = shapes[:4]
    assert [n for n, *_ in probes] == [1, 2, 4, 3]  # limit min(12 clips, effective 8): 1, 2, 4 fails, 3 fits
    texts = {t for _, ts, _, _ in probes for t in ts}
    codes, wavs = {c for *_, c, _ in probes}, {w for *_, ws in probes for w in ws}
    assert len(texts) == len(codes) == len(wavs) == 1  # every row of every probe: the same worst-case lengths
    trained = shapes[4:-1]  # pre-flight and training batches (the last forward is the eval batch)
    assert max(texts) >= max(max(ts) for _, ts, _, _ in trained)  # no training batch has longer text
    assert max(codes) >= max(c for *_, c, _ in trained) and max(wavs) >= max(max(ws) for *_, ws in trained)
    assert "batch_size auto: 2 (largest fitting 3" in caplog.text  # 90 % of 3
    assert "effective batch: 2 x 4 accumulation x 1 process(es) = 8" in caplog.text
    state = CheckpointStore.load_state(result.last_checkpoint)
    assert state.sampler["batch_size"] == 2 and state.training_config["grad_accum_steps"] == 4
    assert state.sampler["batch_index"] == 4  # 1 step x 4 micro-batches
    assert all(n == 2 for n, *_ in shapes[4:])  # pre-flight, training and eval batches

    shapes.clear()
    trainer(small_config(run, training={"max_steps": 2, "batch_size": "auto", "effective_batch_size": 8}),
            model_factory=factory)
    assert "batch_size auto: 2, as in the checkpoint" in caplog.text
    assert shapes and all(n == 2 for n, *_ in shapes)  # no probing on resume: the same batches continue


def test_gradient_checkpointing_and_auto_batch_size(trainer, model_factory, tmp_path, caplog):
    caplog.set_level("INFO")
    losses, models = {}, []
    for checkpointing, batch_size in ((True, "auto"), (False, 4)):
        run = tmp_path / f"gc_{checkpointing}"
        trainer(small_config(run, training={"max_steps": 2, "batch_size": batch_size,
                                            "gradient_checkpointing": checkpointing}),
                model_factory=lambda *a: models.append(model_factory(*a)) or models[-1])
        losses[checkpointing] = [(r["loss"], r["grad_norm"]) for r in train_lines(run)]
    assert "batch_size auto: 4 on cpu" in caplog.text and "gradient checkpointing on" in caplog.text
    assert "effective batch 4" in caplog.text
    assert models[0].gpt.gpt.h[0].gradient_checkpointing and not models[1].gpt.gpt.h[0].gradient_checkpointing
    assert not hasattr(models[0].gpt.gpt, "wte")  # the temporary alias is gone
    for (a_loss, a_norm), (b_loss, b_norm) in zip(losses[True], losses[False], strict=True):
        assert a_loss == pytest.approx(b_loss, rel=1e-5) and a_norm == pytest.approx(b_norm, rel=1e-4)


def _real_inputs(model, dataset, tokenizer, n=3):
    from xtts_ft.model import model_limits
    from xtts_ft.train.codes_cache import codes_for_batch
    from xtts_ft.train.data import ClipDataset, Limits, collate, load_clips
    from xtts_ft.train.sampler import ItemKey

    clips, _ = load_clips(dataset[0], tokenizer, "am", Limits(**model_limits(model.xtts)), progress=False)
    ds = ClipDataset(clips[:n], sample_rate=22050, cond_min_s=0.4, cond_max_s=0.8, seed=0, train=True)
    batch = collate([ds[ItemKey(i, 0, 0, i, 0)] for i in range(n)])
    return {"text_inputs": batch["padded_text"], "text_lengths": batch["text_lengths"],
            "audio_codes": codes_for_batch(model, batch["wav"]), "wav_lengths": batch["wav_lengths"],
            "cond_mels": model.conditioning_mels(batch["conditioning"]), "cond_idxs": batch["cond_idxs"],
            "cond_lens": None}


def test_gradient_checkpointing_recomputes_blocks_with_the_same_loss_and_gradients(built_model, dataset, tokenizer):
    inputs = _real_inputs(built_model, dataset, tokenizer)
    results = {}
    for checkpointing in (False, True):
        model = copy.deepcopy(built_model)
        if checkpointing:
            enable_gradient_checkpointing(model.gpt)
        model.train()
        calls = []
        model.gpt.gpt.h[0].attn.register_forward_pre_hook(lambda *_, calls=calls: calls.append(1))  # in the checkpointed forward
        torch.manual_seed(0)  # dropout is on: the same masks in both runs (and in the recomputation)
        loss = model(**{**inputs, "cond_idxs": inputs["cond_idxs"].clone()})["loss"]
        loss.backward()
        grads = {n: p.grad.clone() for n, p in model.gpt.named_parameters() if p.grad is not None}
        results[checkpointing] = (loss.item(), grads, len(calls))
    (loss_a, grads_a, calls_a), (loss_b, grads_b, calls_b) = results[False], results[True]
    assert calls_a == 1 and calls_b == 2  # with checkpointing the block runs again in backward
    assert loss_b == pytest.approx(loss_a, rel=1e-6)
    assert grads_a.keys() == grads_b.keys() and len(grads_a) > 50
    for name in grads_a:
        torch.testing.assert_close(grads_b[name], grads_a[name], rtol=1e-4, atol=1e-7, msg=name)


def test_offload_plan_and_placement_move_only_the_frozen_modules(built_model, monkeypatch):
    assert offload_plan(True, codes_cached=True) == ["xtts.hifigan_decoder", "dvae"]
    assert offload_plan(True, codes_cached=False) == ["xtts.hifigan_decoder"]  # codes per step need the DVAE
    assert offload_plan(False, codes_cached=True) == []

    model = copy.deepcopy(built_model)
    names = offload_plan(True, codes_cached=True)
    place_modules(model, names, torch.device("meta"))  # a second "device" on a CPU-only machine
    devices = {n: p.device.type for n, p in model.named_parameters()}
    assert {devices[n] for n in devices if n.startswith(("dvae.", "xtts.hifigan_decoder."))} == {"meta"}
    assert {devices[n] for n in devices if n.startswith("xtts.gpt.")} == {"cpu"}
    assert next(model.xtts.hifigan_decoder.speaker_encoder.parameters()).device.type == "meta"  # inside the decoder
    assert {b.device.type for b in model.mel_style.buffers()} == {"cpu"}  # the prompt mel extractor stays
    moved = set(offloaded_tensor_names(model, names))
    assert moved == {n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.device.type == "meta"}

    calls = []
    monkeypatch.setattr(memory, "place_modules", lambda m, ns, d: calls.append((tuple(ns), d.type)))
    with pytest.raises(RuntimeError, match="synthesis failed"), modules_on(model, names, torch.device("meta")):
        raise RuntimeError("synthesis failed")
    assert calls == [(tuple(names), "meta"), (tuple(names), "cpu")]  # back on the CPU even after an error


def test_offload_frozen_trains_with_the_frozen_modules_on_the_cpu(trainer, tmp_path, monkeypatch, caplog):
    calls = []
    real = memory.place_modules

    def record(model, names, device):
        calls.append((tuple(names), device.type))
        real(model, names, device)

    monkeypatch.setattr(memory, "place_modules", record)
    monkeypatch.setattr(loop_module, "place_modules", record)

    def eval_hook(step, model):
        calls.append(("hook", next(model.xtts.hifigan_decoder.parameters()).device.type))
        return {}

    caplog.set_level("INFO")
    run = tmp_path / "run"
    cfg = small_config(run, training={"max_steps": 2, "offload_frozen": True}, evaluation={"eval_at_start": True})
    result = trainer(cfg, eval_hook=eval_hook)
    names = ("xtts.hifigan_decoder", "dvae")
    assert result.step == 2 and "on the CPU: xtts.hifigan_decoder, dvae" in caplog.text
    # setup: to the CPU; each evaluation: to the device, hook, back to the CPU
    assert calls == [(names, "cpu")] + [(names, "cpu"), ("hook", "cpu"), (names, "cpu")] * 2
    assert all(math.isfinite(r["loss"]) for r in train_lines(run))


def test_length_bucketing_pads_fewer_frames():
    lengths = np.random.default_rng(0).integers(22050, 22050 * 12, size=640).tolist()  # 1-12 s clips

    def padded_codes(bucketing: bool) -> tuple[int, int]:
        sampler = ResumableBatchSampler(lengths, 8, seed=5, bucketing=bucketing)
        batches = sampler.epoch_batches(0)
        codes = [[math.ceil(lengths[i] / 1024) for i in b] for b in batches]  # DVAE code frames per clip
        return sum(max(c) * len(c) - sum(c) for c in codes), sum(len(b) for b in batches)

    (plain, n_plain), (bucketed, n_bucketed) = padded_codes(False), padded_codes(True)
    assert n_plain == n_bucketed == 640
    assert bucketed < 0.1 * plain  # 32-batch windows sorted by length: a tenth of the padding or less


@pytest.mark.parametrize("world_size", [1, 2])
def test_the_probe_reserves_ddp_gradient_buckets_when_distributed(built_model, dataset, tokenizer, monkeypatch,
                                                                  world_size):
    """With several processes DDP holds a copy of every trainable gradient the probe's steps never allocate."""
    from xtts_ft.model import model_limits
    from xtts_ft.train.data import ClipDataset, Limits, load_clips

    trainable = [p for p in built_model.gpt.parameters() if p.requires_grad]
    grads = sum(p.numel() * 4 for p in trainable)  # fp32 gradients
    assert memory.ddp_bucket_bytes(trainable, 1) == 0 and memory.ddp_bucket_bytes(trainable, 2) == grads
    reserved = []

    def record(nbytes, device):
        reserved.append(nbytes)
        return memory.contextlib.nullcontext()

    monkeypatch.setattr(memory, "reserve_memory", record)
    limits = Limits(**model_limits(built_model.xtts))
    clips, _ = load_clips(dataset[0], tokenizer, "am", limits, progress=False)
    train_set = ClipDataset(clips, sample_rate=limits.sample_rate, cond_min_s=0.4, cond_max_s=0.8, seed=0, train=True)
    memory.probe_batch_size(built_model, train_set, clips, lambda b, train: b, contextlib.nullcontext, CPU,
                            rank=0, world_size=world_size, effective=None, probe=False)
    adamw = 2 * grads
    assert reserved == [adamw + (grads if world_size > 1 else 0)]
