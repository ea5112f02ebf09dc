"""Evaluation losses: the GPT losses over fixed eval batches, as coqui's eval step computes them.

Each eval clip gets a fixed prompt crop (mid length, from the start) and the forward runs without
the prompt mask (``cond_idxs=None``), as coqui's ``GPTTrainer.eval_step`` does, under the run's
autocast. The model inputs (conditioning mels, DVAE codes when they are not cached) are built
*outside* autocast, exactly as training builds them: inside it the mel extractor runs in fp16/bf16,
which shifts the log-mels (by up to 0.03 in bf16) and turns a loud clip into +inf under fp16.
The result is the clip-weighted mean of ``loss``, ``loss_text_ce`` and ``loss_mel_ce``, read with
one sync at the end; a non-finite mean is returned as it is, for the caller to report.
A stop request is honoured between batches (``StopRequested``).

``evaluate_on_main`` is what rank 0 does for one evaluation: these losses, then the integrator's
evaluation hook (``run_eval_hook``: sample synthesis); the recipe reports a non-finite eval loss
(``report_nonfinite_eval``) and decides whether the result is a new best (progress.py).

A run whose eval clips are in several languages (a dataset list replaying base-language data)
also gets ``eval_loss_<language>`` per language (``language_eval_batches``, used by ``evaluate_on_main``): forgetting the base
language shows up as a rising curve of its own.
"""

from __future__ import annotations

import logging
from typing import Optional, Sequence

import torch
import torch.nn as nn

from xtts_ft.model import XttsTrainingModel
from xtts_ft.stop_signals import StopRequested, raise_if_stopped
from xtts_ft.train.data import BatchInputs, Clip, ClipDataset, collate
from xtts_ft.train.hooks import EvalHook
from xtts_ft.train.memory import modules_on
from xtts_ft.train.metrics import MetricsLogger
from xtts_ft.train.precision import Autocast
from xtts_ft.train.sampler import ItemKey

log = logging.getLogger(__name__)

KEYS = ("loss", "loss_text_ce", "loss_mel_ce")


@torch.no_grad()
def eval_losses(
    model: nn.Module,
    dataset: ClipDataset,
    batches: list[list[ItemKey]],
    autocast: Autocast,
    model_inputs: BatchInputs,
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


def run_eval_hook(hook: EvalHook, step: int, model: XttsTrainingModel, *, offloaded: Sequence[str], device: torch.device,
                  metrics: MetricsLogger) -> dict[str, float]:
    """The integrator's hook (sample synthesis) -> its numeric results. Its random draws are isolated from
    training's, and a failure inside it is logged with its traceback instead of ending hours of training."""
    try:  # offloaded modules (training.offload_frozen) are on the device for synthesis, on the CPU after it
        with modules_on(model, offloaded, device), \
                torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            extra = hook(step, model) or {}
    except Exception as exc:  # noqa: BLE001 - any hook bug; reported, training continues
        log.exception("eval hook failed at step %d; training continues", step)
        metrics.event(step, "eval_hook_failed", error=f"{type(exc).__name__}: {exc}")
        return {}
    return {k: float(v) for k, v in extra.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def report_nonfinite_eval(value: float, step: int, precision: str, metrics: MetricsLogger, is_main: bool) -> None:
    """A NaN/Inf eval loss is a finding, not a gap: warned and recorded (the caller keeps it out of best/last)."""
    if is_main:
        log.warning("eval loss at step %d is %s (%s): the model's eval outputs overflow; this checkpoint gets no "
                    "eval loss and cannot become the best one. If it repeats, set precision.mode: fp32 or lower "
                    "training.lr", step, value, precision)
        metrics.event(step, "eval_nonfinite", eval_loss=str(value), precision=precision)


def evaluate_on_main(model: XttsTrainingModel, eval_set: ClipDataset, batches: list[list[ItemKey]], autocast: Autocast,
                     model_inputs: BatchInputs, *, hook: Optional[EvalHook], step: int, offloaded: Sequence[str],
                     device: torch.device, metrics: MetricsLogger,
                     language_batches: Optional[dict[str, list[list[ItemKey]]]] = None) -> Optional[dict[str, float]]:
    """Rank 0's evaluation of ``step``: the eval losses, then the hook's results, logged (metrics.jsonl) and
    returned as one dict; the model is in eval mode meanwhile. None when a stop request cut it short.
    ``language_batches`` (``language_eval_batches``): also ``eval_loss_<language>`` for each language."""
    model.eval()
    try:
        losses = eval_losses(model, eval_set, batches, autocast, model_inputs)
        for language, language_keys in (language_batches or {}).items():  # a run with base-language data
            losses[f"eval_loss_{language}"] = eval_losses(model, eval_set, language_keys, autocast,
                                                          model_inputs)["eval_loss"]
        extra = run_eval_hook(hook, step, model, offloaded=offloaded, device=device, metrics=metrics) if hook else {}
    except StopRequested:  # the stop comes first: the step is saved, this evaluation is redone on resume
        log.warning("stop requested: the evaluation at step %d is abandoned", step)
        return None
    finally:
        model.train()
    metrics.evaluation(step, losses, extra)
    return {**losses, **extra}


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
