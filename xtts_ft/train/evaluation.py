"""Evaluation losses: the GPT losses over fixed eval batches, as coqui's eval step computes them.

Each eval clip gets a fixed prompt crop (mid length, from the start) and the forward runs without
the prompt mask (``cond_idxs=None``), as coqui's ``GPTTrainer.eval_step`` does, under the run's
autocast. The model inputs (conditioning mels, DVAE codes when they are not cached) are built
*outside* autocast, exactly as training builds them: inside it the mel extractor runs in fp16/bf16,
which shifts the log-mels (by up to 0.03 in bf16) and turns a loud clip into +inf under fp16.
The result is the clip-weighted mean of ``loss``, ``loss_text_ce`` and ``loss_mel_ce``, read with
one sync at the end; a non-finite mean is returned as it is, for the caller to report.
A stop request is honoured between batches (``StopRequested``).
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn

from xtts_ft.stop_signals import raise_if_stopped
from xtts_ft.train.data import ClipDataset, collate
from xtts_ft.train.sampler import ItemKey

KEYS = ("loss", "loss_text_ce", "loss_mel_ce")


@torch.no_grad()
def eval_losses(
    model: nn.Module,
    dataset: ClipDataset,
    batches: list[list[ItemKey]],
    autocast: Callable,
    model_inputs: Callable[..., dict],
) -> dict[str, float]:
    """``{"eval_loss", "eval_loss_text_ce", "eval_loss_mel_ce"}`` over ``batches`` (the model must be in eval mode)."""
    device = next(model.parameters()).device
    totals, count = torch.zeros(len(KEYS), device=device), 0
    for keys in batches:
        raise_if_stopped("the evaluation losses")
        inputs = model_inputs(collate([dataset[k] for k in keys]), train=False)  # fp32, as in training
        with autocast():
            out = model(**inputs)
        totals += torch.stack([out[k].float() for k in KEYS]) * len(keys)
        count += len(keys)
    values = (totals / max(count, 1)).tolist()
    return {f"eval_{k}": v for k, v in zip(KEYS, values)}
