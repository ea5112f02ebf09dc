"""Evaluation losses: the GPT losses over fixed eval batches, as coqui's eval step computes them.

Each eval clip gets a fixed prompt crop (mid length, from the start) and the forward runs without
the prompt mask (``cond_idxs=None``), as coqui's ``GPTTrainer.eval_step`` does, under the run's
autocast. The model inputs (conditioning mels, DVAE codes when they are not cached) are built
*outside* autocast, exactly as training builds them: inside it the mel extractor runs in fp16/bf16,
which shifts the log-mels (by up to 0.03 in bf16) and turns a loud clip into +inf under fp16.
The result is the clip-weighted mean of ``loss``, ``loss_text_ce`` and ``loss_mel_ce``, read with
one sync at the end; a non-finite mean is returned as it is, for the caller to report.
A stop request is honoured between batches (``StopRequested``).

A run whose eval clips are in several languages (a dataset list replaying base-language data)
also gets ``eval_loss_<language>`` per language (``eval_losses_by_language``): forgetting the base
language shows up as a rising curve of its own.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
import torch.nn as nn

from xtts_ft.train.data import Clip, ClipDataset, collate
from xtts_ft.train.sampler import ItemKey
from xtts_ft.train.signals import raise_if_stopped

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


def language_eval_batches(clips: Sequence[Clip], batch_size: int, max_batches: int) -> dict[str, list[list[ItemKey]]]:
    """Fixed eval batches per language (clips in CSV order, at most ``max_batches`` each); empty for one language."""
    by_language: dict[str, list[int]] = {}
    for i, clip in enumerate(clips):
        by_language.setdefault(clip.language, []).append(i)
    if len(by_language) < 2:
        return {}
    out = {}
    for language, indices in sorted(by_language.items()):
        picked = indices[: batch_size * max_batches]
        keys = [ItemKey(c, 0, n // batch_size, n % batch_size, 0) for n, c in enumerate(picked)]
        out[language] = [keys[s : s + batch_size] for s in range(0, len(keys), batch_size)]
    return out


def eval_losses_by_language(model: nn.Module, dataset: ClipDataset, clips: Sequence[Clip], batch_size: int,
                            max_batches: int, autocast: Callable, model_inputs: Callable[..., dict]) -> dict[str, float]:
    """``{"eval_loss_<language>": ...}`` for each language of the eval clips; ``{}`` when they are all one language."""
    out = {}
    for language, batches in language_eval_batches(clips, batch_size, max_batches).items():
        out[f"eval_loss_{language}"] = eval_losses(model, dataset, batches, autocast, model_inputs)["eval_loss"]
    return out
