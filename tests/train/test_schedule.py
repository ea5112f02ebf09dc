"""LR schedule, weight-decay groups, and the new-token LR multiplier."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn

from xtts_ft.config import TrainingConfig
from xtts_ft.train.schedule import NewTokenRows, get_lr, param_groups


def test_get_lr_warmup_then_each_schedule():
    cfg = TrainingConfig(lr=1e-3, warmup_steps=4, max_steps=104, lr_schedule="constant")
    assert [get_lr(s, cfg) for s in range(5)] == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3])
    cos = TrainingConfig(lr=1e-3, warmup_steps=4, max_steps=104, lr_schedule="cosine", min_lr_ratio=0.1)
    assert get_lr(4, cos) == pytest.approx(1e-3)
    assert get_lr(54, cos) == pytest.approx(1e-4 + 0.9e-3 * 0.5)  # half way: mid point
    assert get_lr(104, cos) == pytest.approx(1e-4) and get_lr(500, cos) == pytest.approx(1e-4)
    step = TrainingConfig(lr=1e-3, warmup_steps=0, lr_schedule="step", step_every=10, step_gamma=0.5)
    assert [get_lr(s, step) for s in (0, 9, 10, 25)] == pytest.approx([1e-3, 1e-3, 5e-4, 2.5e-4])


def test_weight_decay_only_on_weight_matrices(built_model):
    gpt = built_model.gpt
    groups = {g["name"]: {id(p) for p in g["params"]} for g in param_groups(gpt, 0.01)}
    names = {id(p): n for n, p in gpt.named_parameters()}
    decayed = {names[i] for i in groups["decay"]}
    plain = {names[i] for i in groups["no_decay"]}
    assert "text_head.weight" in decayed and "gpt.h.0.attn.c_attn.weight" in decayed  # Linear and GPT-2 Conv1D
    for name in ("text_embedding.weight", "mel_embedding.weight", "text_pos_embedding.emb.weight",
                 "final_norm.weight", "text_head.bias", "gpt.h.0.ln_1.weight"):
        assert name in plain, name
    assert not any(n.endswith(".bias") for n in decayed)
    assert len(decayed) + len(plain) == len(list(gpt.parameters()))


class Toy(nn.Module):
    def __init__(self):
        super().__init__()
        self.text_embedding = nn.Embedding(10, 4)
        self.text_head = nn.Linear(4, 10)


def _run(multiplier: float, split: bool) -> list[torch.Tensor]:
    torch.manual_seed(0)
    toy = Toy()
    x = torch.tensor([1, 7, 8, 3])
    if split:  # reference: old rows and new rows as separate tensors with their own LR
        emb = toy.text_embedding.weight
        emb_old, emb_new = nn.Parameter(emb[:6].clone()), nn.Parameter(emb[6:].clone())
        w_old, w_new = nn.Parameter(toy.text_head.weight[:6].clone()), nn.Parameter(toy.text_head.weight[6:].clone())
        b_old, b_new = nn.Parameter(toy.text_head.bias[:6].clone()), nn.Parameter(toy.text_head.bias[6:].clone())
        opt = torch.optim.AdamW([
            {"params": [w_old], "weight_decay": 0.1, "lr": 1e-2},
            {"params": [w_new], "weight_decay": 0.1, "lr": 1e-2 * multiplier},
            {"params": [emb_old, b_old], "weight_decay": 0.0, "lr": 1e-2},
            {"params": [emb_new, b_new], "weight_decay": 0.0, "lr": 1e-2 * multiplier},
        ])
        for _ in range(5):
            emb = torch.cat([emb_old, emb_new])
            logits = emb[x] @ torch.cat([w_old, w_new]).T + torch.cat([b_old, b_new])
            nn.functional.cross_entropy(logits, x.flip(0)).backward()
            opt.step()
            opt.zero_grad()
        return [torch.cat([emb_old, emb_new]).detach(), torch.cat([w_old, w_new]).detach()]
    groups = [{"params": [toy.text_head.weight], "weight_decay": 0.1},
              {"params": [toy.text_embedding.weight, toy.text_head.bias], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=1e-2)
    rows = NewTokenRows(toy, base_vocab_size=6, multiplier=multiplier)
    for _ in range(5):
        nn.functional.cross_entropy(toy.text_head(toy.text_embedding(x)), x.flip(0)).backward()
        rows.before_step()
        opt.step()
        rows.after_step()
        opt.zero_grad()
    return [toy.text_embedding.weight.detach(), toy.text_head.weight.detach()]


def test_new_token_lr_multiplier_equals_adamw_with_a_higher_lr_on_new_rows():
    ours, reference, plain = _run(3.0, split=False), _run(3.0, split=True), _run(1.0, split=False)
    for a, b in zip(ours, reference):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(ours[0][6:], plain[0][6:])  # the multiplier really changed the new rows
    assert math.isclose(NewTokenRows(Toy(), 6, 3.0).new_rows, 4)
