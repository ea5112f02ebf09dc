"""Checks before step 1, so a broken setup fails in seconds with a reason instead of hours later.

1. Trainable vs frozen parameter counts; the optimizer holds exactly the GPT's trainable tensors.
2. Every parameter and buffer sits on the training device (those of the modules
   ``training.offload_frozen`` keeps off it: on the CPU); trainable weights are fp32 (autocast casts
   per operation; fp16 master weights would lose small updates); frozen parts in eval mode.
3. One forward/backward on a real training batch gives a finite loss (else: a diagnosis naming
   the first module whose output is non-finite).
4. Gradients reach the new token rows (ids >= base vocab size) of ``gpt.text_embedding`` and
   ``gpt.text_head``: the rows Amharic depends on. The check batch is built from clips that use
   new tokens; if no training text uses any, the tokenizer is not the extended one (or the
   language code is wrong) and training would never touch the new rows.

The forward/backward runs inside ``torch.random.fork_rng`` and its gradients are cleared, so it
changes neither the model, the optimizer nor any random stream (exact resume depends on that).
"""

from __future__ import annotations

import logging
from typing import Callable, Sequence

import torch
import torch.nn as nn

from xtts_ft.errors import TrainingStopped
from xtts_ft.train.stability import diagnose_nonfinite

log = logging.getLogger(__name__)


def _count(params) -> int:
    return sum(p.numel() for p in params)


def check_setup(model: nn.Module, optimizer: torch.optim.Optimizer, device: torch.device,
                offloaded: Sequence[str] = ()) -> dict[str, int]:
    """Checks 1 and 2; returns the parameter counts. ``offloaded`` submodules must be on the CPU instead."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    frozen = [p for p in model.parameters() if not p.requires_grad]
    gpt_ids = {id(p) for p in model.xtts.gpt.parameters() if p.requires_grad}
    opt_ids = {id(p) for g in optimizer.param_groups for p in g["params"]}
    if {id(p) for p in trainable} != gpt_ids or opt_ids != gpt_ids:
        raise TrainingStopped("pre-flight: the optimizer must hold exactly the GPT's trainable parameters (a bug)")
    prefixes = tuple(f"{name}." for name in offloaded)
    misplaced = [n for n, t in [*model.named_parameters(), *model.named_buffers()]
                 if t.device != (torch.device("cpu") if n.startswith(prefixes) else device)]
    if misplaced:
        raise TrainingStopped(f"pre-flight: {len(misplaced)} tensors are not on {device} (e.g. {misplaced[0]})")
    not_fp32 = [n for n, p in model.xtts.gpt.named_parameters() if p.requires_grad and p.dtype != torch.float32]
    if not_fp32:
        dtype = model.xtts.gpt.get_parameter(not_fp32[0]).dtype
        raise TrainingStopped(f"pre-flight: trainable weight xtts.gpt.{not_fp32[0]} is {dtype}, expected float32")
    training_frozen = [n for n, m in model.named_modules() if m.training and not n.startswith("xtts.gpt") and n]
    if training_frozen:
        raise TrainingStopped(f"pre-flight: frozen module {training_frozen[0]} is in training mode (a bug)")
    counts = {"trainable": _count(trainable), "frozen": _count(frozen)}
    log.info("parameters: %s trainable (xtts.gpt), %s frozen", f"{counts['trainable']:,}", f"{counts['frozen']:,}")
    return counts


def pick_check_clips(
    token_lists: Sequence[Sequence[int]], base_vocab_size: int, vocab_size: int, batch_size: int
) -> list[int]:
    """Indices of up to ``batch_size`` clips, those using new tokens first; raises if new rows are never used."""
    users = [i for i, toks in enumerate(token_lists) if any(t >= base_vocab_size for t in toks)]
    new_rows = vocab_size - base_vocab_size
    if new_rows > 0 and not users:
        raise TrainingStopped(
            f"pre-flight: none of the {new_rows} new tokens (ids >= {base_vocab_size}) occurs in any training text, so "
            f"they would never train; check that vocab.json is the extended vocabulary and run.language is 'am'"
        )
    chosen = users[:batch_size]
    taken = set(chosen)
    return chosen + [i for i in range(len(token_lists)) if i not in taken][: batch_size - len(chosen)]


def check_forward_backward(
    model: nn.Module,
    inputs: dict,
    autocast: Callable,
    base_vocab_size: int,
    device: torch.device,
) -> float:
    """Checks 3 and 4 on one prepared batch; returns the loss."""
    gpt = model.xtts.gpt
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        gpt.zero_grad(set_to_none=True)
        args = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
        with autocast():
            loss = model(**args)["loss"]
        if not torch.isfinite(loss):
            where = diagnose_nonfinite(model, [inputs], autocast)
            raise TrainingStopped(f"pre-flight: the first training batch gives a non-finite loss; {where}")
        loss.backward()
        value = float(loss.detach())
        rows = gpt.text_embedding.weight.shape[0]
        if rows > base_vocab_size:
            used = torch.unique(inputs["text_inputs"].long())
            used = used[used >= base_vocab_size]
            emb_grad = gpt.text_embedding.weight.grad
            head_grad = gpt.text_head.weight.grad
            all_new = torch.arange(base_vocab_size, rows, device=device)
            for name, grad, idx in (("text_embedding", emb_grad, used), ("text_head", head_grad, all_new)):
                if grad is None or not bool(grad[idx].abs().sum(dim=-1).gt(0).all()):
                    gpt.zero_grad(set_to_none=True)
                    raise TrainingStopped(
                        f"pre-flight: no gradient reaches the new token rows (ids >= {base_vocab_size}) of "
                        f"xtts.gpt.{name}; "
                        f"they would never train (are they frozen or detached?)"
                    )
            log.info("pre-flight: gradients reach the %d new token rows (%d used by the check batch)",
                     rows - base_vocab_size, used.numel())
        gpt.zero_grad(set_to_none=True)
    log.info("pre-flight: first batch loss %.4f (finite)", value)
    return value
