"""The optimizer and the learning rate: AdamW param groups, ``get_lr``, and the new-token LR multiplier.

``get_lr(step, cfg)`` is a pure function of the optimizer step (0-based index of the step about to
be taken): linear warm-up over ``warmup_steps``, then constant, cosine (down to
``min_lr_ratio * lr`` at ``max_steps``) or step decay. The loop sets it on every param group before
every optimizer step, so there is no scheduler object whose state could drift or never step
(coqui's Trainer never steps a per-epoch scheduler with one optimizer).

Weight decay goes to weight *matrices* only: parameters named ``weight`` with two or more
dimensions, owned by a Linear / Conv / GPT-2 Conv1D module. Biases, norm gains, embeddings
(text, audio-code and position tables) and the perceiver's free latents are not decayed.
Embeddings are excluded on purpose: the text rows added for Amharic start from the statistics of
the trained rows, and decay would drag rarely-seen tokens toward zero between their updates.

The new-token LR multiplier cannot be a gradient hook: Adam divides the gradient by its own
running RMS, so scaling a row's gradient by k leaves its update unchanged (up to eps). A separate
param group for a row slice is impossible (a group holds whole tensors). :class:`NewTokenRows`
instead rescales the *update* of those rows after each optimizer step:
``row = before + k * (after - before)``. AdamW's update (Adam step plus decoupled decay) is
linear in the LR, so this is exactly AdamW with LR ``k * lr`` for those rows.
"""

from __future__ import annotations

import math
from typing import Iterable, TypedDict

import torch
import torch.nn as nn

from xtts_ft.config import TrainingConfig

_DECAYED_MODULES: tuple[type, ...] = (nn.Linear, nn.Conv1d, nn.Conv2d)
# rows of the GPT that are indexed by text-token id (see xtts_ft.tokenizer.resize.TEXT_ROW_KEYS)
NEW_TOKEN_ROW_PARAMS = ("text_embedding.weight", "text_head.weight", "text_head.bias")


def get_lr(step: int, cfg: TrainingConfig) -> float:
    """Learning rate for optimizer step ``step`` (0-based): warm-up, then the configured schedule."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    after = step - cfg.warmup_steps
    if cfg.lr_schedule == "constant":
        return cfg.lr
    if cfg.lr_schedule == "cosine":
        span = max(1, cfg.max_steps - cfg.warmup_steps)
        progress = min(1.0, after / span)
        floor = cfg.lr * cfg.min_lr_ratio
        return floor + (cfg.lr - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))
    if cfg.lr_schedule == "step":
        return cfg.lr * cfg.step_gamma ** (after // cfg.step_every)
    raise ValueError(f"unknown lr_schedule {cfg.lr_schedule!r}")  # the config schema prevents this


def _is_decayed(module: nn.Module, name: str, param: nn.Parameter) -> bool:
    if name != "weight" or param.ndim < 2:
        return False
    if isinstance(module, _DECAYED_MODULES):
        return True
    return type(module).__name__ == "Conv1D"  # transformers' GPT-2 projection (a Linear with a transposed weight)


class ParamGroup(TypedDict):
    """One AdamW parameter group as :func:`param_groups` builds it (``name`` tells the two apart on a resume)."""

    params: list[nn.Parameter]
    weight_decay: float
    name: str


def param_groups(module: nn.Module, weight_decay: float) -> list[ParamGroup]:
    """Trainable parameters of ``module`` split into a decayed and a non-decayed AdamW group."""
    decay: list[nn.Parameter] = []
    no_decay: list[nn.Parameter] = []
    seen: set[int] = set()
    for mod in module.modules():
        for name, param in mod.named_parameters(recurse=False):
            if not param.requires_grad or id(param) in seen:
                continue
            seen.add(id(param))
            (decay if _is_decayed(mod, name, param) else no_decay).append(param)
    return [
        {"params": decay, "weight_decay": weight_decay, "name": "decay"},
        {"params": no_decay, "weight_decay": 0.0, "name": "no_decay"},
    ]


def build_optimizer(gpt: nn.Module, cfg: TrainingConfig, device: torch.device) -> torch.optim.AdamW:
    """AdamW over the GPT's trainable parameters only (everything else in the model is frozen)."""
    groups = [g for g in param_groups(gpt, cfg.weight_decay) if g["params"]]
    fused = device.type == "cuda"  # one kernel per step on GPU; the foreach path elsewhere
    return torch.optim.AdamW(groups, lr=get_lr(0, cfg), betas=tuple(cfg.betas), weight_decay=cfg.weight_decay,
                             fused=fused)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


class NewTokenRows:
    """Scales the optimizer update of text-token rows ``>= base_vocab_size`` by ``multiplier``.

    Call :meth:`before_step` right before ``optimizer.step()`` and :meth:`after_step` right after;
    both are no-ops when the multiplier is 1 or the vocabulary has no new rows.
    """

    def __init__(self, gpt: nn.Module, base_vocab_size: int, multiplier: float):
        params = dict(gpt.named_parameters())
        self.base = int(base_vocab_size)
        self.multiplier = float(multiplier)
        self.params = [params[n] for n in NEW_TOKEN_ROW_PARAMS if n in params]
        self.vocab_size = self.params[0].shape[0] if self.params else 0
        self._before: list[torch.Tensor] = []

    @property
    def new_rows(self) -> int:
        return max(0, self.vocab_size - self.base)

    @property
    def active(self) -> bool:
        return self.new_rows > 0 and self.multiplier != 1.0

    @torch.no_grad()
    def before_step(self) -> None:
        if self.active:
            self._before = [p[self.base :].detach().clone() for p in self.params]

    @torch.no_grad()
    def after_step(self) -> None:
        if not self.active:
            return
        for param, before in zip(self.params, self._before):
            rows = param[self.base :]
            rows.copy_(torch.lerp(before, rows, self.multiplier))  # before + k * (after - before)
        self._before = []


def count_parameters(params: Iterable[nn.Parameter]) -> int:
    return sum(p.numel() for p in params)
