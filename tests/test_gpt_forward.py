"""The fast training forward (xtts_ft/gpt_forward.py) is coqui's GPT forward: the same losses and the same gradient
of every trainable tensor on padded batches of mixed lengths (fp32, CPU), prompt mask and conditioning included.

Dropout is set to 0 in both: it draws its random numbers over differently laid-out tensors, so with it on the two
paths are equal only in distribution (see the module doc).
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from transformers.activations import NewGELUActivation

from xtts_ft.config import TrainingConfig
from xtts_ft.gpt_forward import EAGER, _layout, fast_gpt_losses
from xtts_ft.gpt_targets import mel_targets, text_inputs_and_targets
from xtts_ft.model import coqui_gpt_losses
from xtts_ft.train.memory import enable_gradient_checkpointing
from xtts_ft.train.trainable import apply_trainable

REL = 1e-5


def no_dropout(module: nn.Module) -> nn.Module:
    for m in module.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0
    return module


def small_gpt(seed: int = 0, layers: int = 2) -> nn.Module:
    from TTS.tts.layers.xtts.gpt import GPT

    torch.manual_seed(seed)
    gpt = GPT(layers=layers, model_dim=64, heads=4, max_text_tokens=40, max_mel_tokens=60, max_prompt_tokens=70,
              number_text_tokens=100, num_audio_tokens=258, start_audio_token=256, stop_audio_token=257,
              start_text_token=99, stop_text_token=0, use_perceiver_resampler=True, code_stride_len=1024)
    return no_dropout(gpt).train()


def mixed_batch(seed: int = 1) -> dict:
    """Four rows whose text and audio lengths all differ (the longest text is not the longest audio)."""
    g = torch.Generator().manual_seed(seed)
    text_lengths = torch.tensor([5, 17, 9, 12])
    wav_lengths = torch.tensor([20 * 1024, 9 * 1024 + 5, 33 * 1024 - 7, 14 * 1024])
    return dict(text_inputs=torch.randint(1, 98, (4, 20), generator=g, dtype=torch.int32), text_lengths=text_lengths,
                audio_codes=torch.randint(0, 256, (4, 36), generator=g), wav_lengths=wav_lengths,
                cond_mels=torch.randn(4, 1, 80, 100, generator=g),
                cond_idxs=torch.tensor([[0, 3000], [1024, 5000], [2048, 9000], [500, 7000]]))


def losses_and_grads(fn, gpt: nn.Module, batch: dict, **kw) -> tuple[list[float], dict[str, torch.Tensor]]:
    gpt.zero_grad(set_to_none=True)
    args = {k: v.clone() for k, v in batch.items()}
    loss_text, loss_mel = fn(gpt, **args, **kw)
    (loss_text * 0.01 + loss_mel).backward()
    grads = {n: p.grad.clone() for n, p in gpt.named_parameters() if p.requires_grad}
    gpt.zero_grad(set_to_none=True)
    return [loss_text.item(), loss_mel.item()], grads


def assert_same(a, b, rel: float = REL) -> None:
    (losses_a, grads_a), (losses_b, grads_b) = a, b
    assert losses_a == pytest.approx(losses_b, rel=rel)
    assert grads_a.keys() == grads_b.keys()
    missing = [n for n, g in grads_a.items() if (g is None) != (grads_b[n] is None)]
    assert not missing, f"a gradient in one path only: {missing[:3]}"
    for name, ga in grads_a.items():
        if ga is None:
            continue
        scale = ga.abs().max().clamp_min(1e-12)
        assert ((ga - grads_b[name]).abs().max() / scale).item() < rel, name


def test_losses_and_every_gradient_equal_coqui_on_a_padded_mixed_batch():
    gpt, batch = small_gpt(), mixed_batch()
    coqui = losses_and_grads(coqui_gpt_losses, gpt, batch)
    fast = losses_and_grads(fast_gpt_losses, gpt, batch)
    assert_same(coqui, fast)
    trained = [n for n, g in fast[1].items() if g is not None and g.abs().sum() > 0]
    assert any(n.startswith("conditioning_perceiver") for n in trained)  # the conditioning prefix trains
    assert any(n.startswith("gpt.h.1.") for n in trained) and "text_head.weight" in trained


def test_without_prompt_mask_and_in_eval_mode_too():
    gpt, batch = small_gpt(seed=3), mixed_batch(seed=4)
    batch.pop("cond_idxs")
    assert_same(losses_and_grads(coqui_gpt_losses, gpt, batch), losses_and_grads(fast_gpt_losses, gpt, batch))
    gpt.eval()
    with torch.no_grad():
        assert fast_gpt_losses(gpt, **batch)[1].item() == pytest.approx(coqui_gpt_losses(gpt, **batch)[1].item(),
                                                                         rel=REL)


def test_prompt_mask_changes_the_mel_loss():
    """The prompt mask is really applied (a forward that dropped it would still match coqui's unmasked loss)."""
    gpt, batch = small_gpt(), mixed_batch()
    masked = fast_gpt_losses(gpt, **batch)[1].item()
    unmasked = fast_gpt_losses(gpt, **{k: v for k, v in batch.items() if k != "cond_idxs"})[1].item()
    assert masked != pytest.approx(unmasked, rel=1e-4)


def test_gradient_checkpointing_gives_the_same_gradients():
    gpt, batch = small_gpt(), mixed_batch()
    reference = losses_and_grads(coqui_gpt_losses, gpt, batch)
    enable_gradient_checkpointing(gpt)
    assert gpt.gpt.gradient_checkpointing
    assert_same(reference, losses_and_grads(fast_gpt_losses, gpt, batch))


def test_lora_adapters_run_in_the_fast_forward():
    gpt, batch = small_gpt(), mixed_batch()
    tcfg = TrainingConfig(trainable="lora", lora_rank=4, lora_dropout=0.0)
    apply_trainable(gpt, tcfg, base_vocab_size=90)
    with torch.no_grad():  # adapters start as zero updates (B = 0): give them weight so that they count
        for name, p in gpt.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    coqui, fast = losses_and_grads(coqui_gpt_losses, gpt, batch), losses_and_grads(fast_gpt_losses, gpt, batch)
    assert_same(coqui, fast)
    assert any("lora_A" in n and g.abs().sum() > 0 for n, g in fast[1].items() if g is not None)


def test_the_training_model_switches_paths_and_equals_coqui(built_model):
    """XttsTrainingModel.forward on the tiny XTTS: fast and coqui give the same weighted losses and gradients."""
    model = no_dropout(copy.deepcopy(built_model)).train()
    g = torch.Generator().manual_seed(0)
    wav_lengths = torch.tensor([30000, 12000, 21000])
    inputs = dict(text_inputs=torch.randint(3, 40, (3, 15), generator=g), text_lengths=torch.tensor([15, 6, 11]),
                  audio_codes=torch.randint(0, 256, (3, 30), generator=g), wav_lengths=wav_lengths,
                  cond_mels=model.conditioning_mels(torch.randn(3, 1, 1, 16000, generator=g)),
                  cond_idxs=torch.tensor([[0, 8000], [2000, 9000], [4000, 12000]]))

    def run(path: str):
        model.use_forward(path)
        model.zero_grad(set_to_none=True)
        out = model(**{k: v.clone() for k, v in inputs.items()})
        out["loss"].backward()
        grads = {n: p.grad.clone() for n, p in model.xtts.gpt.named_parameters() if p.grad is not None}
        return [out[k].item() for k in ("loss", "loss_text_ce", "loss_mel_ce")], grads

    assert_same(run("coqui"), run("fast"))
    with pytest.raises(ValueError, match="expected 'fast' or 'coqui'"):
        model.use_forward("quick")


class _AttentionCalls(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention:
            self.calls.append((kwargs.get("attn_mask", args[3] if len(args) > 3 else None), kwargs.get("is_causal")))
        return func(*args, **kwargs)


def test_attention_gets_no_mask_and_is_causal():
    """The point of the layout: SDPA sees no materialised mask (its flash path), where coqui's forward hands it one."""
    gpt, batch = small_gpt(), mixed_batch()
    with _AttentionCalls() as fast:
        fast_gpt_losses(gpt, **batch)
    assert len(fast.calls) == 2 and all(mask is None and causal is True for mask, causal in fast.calls)
    with _AttentionCalls() as coqui:
        coqui_gpt_losses(gpt, **batch)
    assert coqui.calls and all(mask is not None for mask, _ in coqui.calls)


def test_layout_puts_padding_after_the_audio():
    """[cond 2][text][audio][padding]: row 0 has 3 text + 2 audio positions, row 1 has 1 + 4 (text width 3)."""
    source, mel_start = _layout(2, torch.tensor([3, 1]), torch.tensor([2, 4]), text_width=3, length=8)
    assert source.tolist() == [[0, 1, 2, 3, 4, 5, 6, 0], [0, 1, 2, 5, 6, 7, 8, 0]]
    assert mel_start.squeeze(1).tolist() == [5, 3]
    assert EAGER.padded_length(13) == 13


def test_targets_equal_coqui_targets():
    """The loop-free targets equal the ones coqui's set_mel_padding / -1 loops build."""
    gpt, b = small_gpt(), mixed_batch()
    codes = b["audio_codes"].clone()
    code_lengths = torch.ceil(b["wav_lengths"] / 1024).long() + 3
    max_mel = int(code_lengths.max())
    padded = F.pad(F.pad(codes, (0, max_mel - codes.shape[1]))[:, :max_mel], (0, 1), value=gpt.stop_audio_token)
    padded = gpt.set_mel_padding(padded, code_lengths - 3)
    _, expected = gpt.set_inputs_and_targets(padded, gpt.start_audio_token, gpt.stop_audio_token)
    for i, n in enumerate(code_lengths.tolist()):
        expected[i, n + 1:] = -1
    assert torch.equal(mel_targets(gpt, b["audio_codes"], b["wav_lengths"]), expected)
    max_text = int(b["text_lengths"].max())
    text = F.pad(b["text_inputs"][:, :max_text], (0, 1), value=gpt.stop_text_token)
    _, text_expected = gpt.set_inputs_and_targets(text, gpt.start_text_token, gpt.stop_text_token)
    for i, n in enumerate(b["text_lengths"].tolist()):
        text_expected[i, n + 1:] = -1
    assert torch.equal(text_inputs_and_targets(gpt, b["text_inputs"], b["text_lengths"], max_text)[1],
                       text_expected.long())


def test_tanh_gelu_is_gelu_new():
    x = torch.linspace(-8, 8, 10001)
    assert torch.allclose(F.gelu(x, approximate="tanh"), NewGELUActivation()(x), rtol=1e-6, atol=1e-6)


def test_the_same_modules_run_and_their_hooks_fire():
    """Forward hooks (the stability layer's diagnosis, fault injection) see the same modules in both forwards, and a
    hook's changed output counts (an injected inf reaches the loss)."""
    gpt, batch = small_gpt(), mixed_batch()
    fired: list[str] = []
    handles = [m.register_forward_hook(lambda _m, _a, _o, n=n: fired.append(n)) for n, m in gpt.named_modules() if n]
    coqui_gpt_losses(gpt, **{k: v.clone() for k, v in batch.items()})
    coqui = set(fired)
    fired.clear()
    fast_gpt_losses(gpt, **batch)
    for h in handles:
        h.remove()
    assert set(fired) == coqui and {"gpt.h.1.mlp", "gpt.h.1.mlp.act", "gpt.h.0.attn", "gpt.h.0", "gpt"} <= coqui
    seen = []
    gpt.register_forward_pre_hook(lambda _m, args: seen.append(tuple(a.shape for a in args)))
    gpt.gpt.h[1].mlp.register_forward_hook(lambda _m, _a, out: out * float("inf"))
    loss_text, loss_mel = fast_gpt_losses(gpt, **batch)
    assert not torch.isfinite(loss_mel) and seen == [(torch.Size([4, 20]), torch.Size([4]), torch.Size([4, 36]),
                                                       torch.Size([4]))]
