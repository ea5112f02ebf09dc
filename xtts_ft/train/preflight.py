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
   The backward runs under the run's loss scale (``scaler.scale(loss)``), as a training step does.
   Under fp16 the loss gradient reaching a new ``text_head`` row that is not a target is about
   text-loss weight x p / tokens; with a trained model's peaked logits that is below fp16's
   smallest subnormal (~6e-8), often even at the scaler's scale, so those rows get exactly 0 from
   this batch although nothing is wrong (an unscaled, value-only check stopped every fp16 run on
   a T4/V100). So the head is checked in two parts: the loss gradient must reach the head at all,
   and every new row must be *connected*: the gradient of the sum of its logits (a unit gradient,
   which cannot underflow) must be non-zero. A frozen or detached row fails that at any precision.

The forward/backward runs inside ``torch.random.fork_rng`` and its gradients are cleared, so it
changes neither the model, the optimizer nor any random stream (exact resume depends on that).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Iterable, Optional, Sequence

import torch
import torch.nn as nn

from xtts_ft.errors import TrainingStopped
from xtts_ft.train.precision import Autocast
from xtts_ft.train.stability import diagnose_nonfinite

if TYPE_CHECKING:  # a name for annotations: train/data.py loads soundfile and the tokenizer, unused here
    from xtts_ft.train.data import ModelInputs

log = logging.getLogger(__name__)


def _count(params: Iterable[torch.nn.Parameter]) -> int:
    return sum(p.numel() for p in params)


def check_setup(model: nn.Module, optimizer: torch.optim.Optimizer, device: torch.device,
                offloaded: Sequence[str] = (), kept: int = 0) -> dict[str, int]:
    """Checks 1 and 2; returns the parameter counts. ``offloaded`` submodules must be on the CPU instead.
    ``kept``: weights inside trainable tensors that never change (the base vocabulary's rows under
    ``training.trainable`` freeze/lora): counted as frozen, so this count is the one ``apply_trainable`` logs."""
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
    counts = {"trainable": _count(trainable) - kept, "frozen": _count(frozen) + kept}
    log.info("parameters: %s trainable (xtts.gpt), %s frozen%s", f"{counts['trainable']:,}", f"{counts['frozen']:,}",
             f" (of which {kept:,} in the base vocabulary's text rows)" if kept else "")
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


def _no_gradient(base_vocab_size: int, name: str) -> TrainingStopped:
    return TrainingStopped(
        f"pre-flight: no gradient reaches the new token rows (ids >= {base_vocab_size}) of xtts.gpt.{name}; "
        f"they would never train (are they frozen or detached?)"
    )


class _HeadOutput:
    """Keeps the output of ``gpt.text_head`` (the text logits, vocabulary last) of one forward pass."""

    def __init__(self, head: nn.Module) -> None:
        self.logits: Optional[torch.Tensor] = None
        self._handle = head.register_forward_hook(self._keep)

    def _keep(self, _module: nn.Module, _args: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
        self.logits = output

    def remove(self) -> None:
        self._handle.remove()


def _head_rows_connected(logits: Optional[torch.Tensor], weight: torch.Tensor, first: int) -> torch.Tensor:
    """Per new row of the text head: whether d(mean of its logits over the positions)/d(row) is non-zero.

    A gradient of 1/positions on every logit, so no loss-sized factor (probability / tokens) can
    underflow it: this is the graph's connectivity, which a frozen (requires_grad off) or detached
    row fails.
    """
    rows = weight.shape[0] - first
    if logits is None or not weight.requires_grad or not logits.requires_grad or logits.shape[-1] != weight.shape[0]:
        return torch.zeros(rows, dtype=torch.bool, device=weight.device)
    new = logits[..., first:].float()
    positions = max(1, new[..., 0].numel())  # a mean over the token positions: an fp16 sum of them could overflow
    (grad,) = torch.autograd.grad(new.sum() / positions, weight, retain_graph=True, allow_unused=True)
    if grad is None:
        return torch.zeros(rows, dtype=torch.bool, device=weight.device)
    return grad[first:].ne(0).any(dim=-1)  # NaN != 0 too: a gradient did arrive


def check_forward_backward(
    model: nn.Module,
    inputs: ModelInputs,
    autocast: Autocast,
    base_vocab_size: int,
    device: torch.device,
    scaler: Optional[torch.amp.GradScaler] = None,
) -> float:
    """Checks 3 and 4 on one prepared batch; returns the loss.

    ``scaler``: the run's GradScaler (a disabled one, or None, for bf16/fp32); only its ``scale`` is
    used, so its state is unchanged.
    """
    gpt = model.xtts.gpt
    devices = [device] if device.type == "cuda" else []
    head = _HeadOutput(gpt.text_head)
    try:
        with torch.random.fork_rng(devices=devices):
            gpt.zero_grad(set_to_none=True)
            args = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
            with autocast():
                loss = model(**args)["loss"]
            if not torch.isfinite(loss):
                where = diagnose_nonfinite(model, [inputs], autocast)
                raise TrainingStopped(f"pre-flight: the first training batch gives a non-finite loss; {where}")
            try:
                _check_new_rows(gpt, inputs, head.logits, loss, base_vocab_size, device, scaler)
            finally:
                gpt.zero_grad(set_to_none=True)
            value = float(loss.detach())
    finally:
        head.remove()
    log.info("pre-flight: first batch loss %.4f (finite)", value)
    return value


def _check_new_rows(gpt: nn.Module, inputs: ModelInputs, logits: Optional[torch.Tensor], loss: torch.Tensor,
                    base_vocab_size: int, device: torch.device, scaler: Optional[torch.amp.GradScaler]) -> None:
    """Check 4 (see the module doc); runs the scaled backward whether or not the vocabulary grew."""
    rows = gpt.text_embedding.weight.shape[0]
    grew = rows > base_vocab_size
    connected = _head_rows_connected(logits, gpt.text_head.weight, base_vocab_size) if grew else None
    scale = float(scaler.get_scale()) if scaler is not None and scaler.is_enabled() else 1.0
    (scaler.scale(loss) if scaler is not None else loss).backward()
    if connected is None:  # the vocabulary did not grow: no new rows to check
        return
    used = torch.unique(inputs["text_inputs"].long())
    used = used[used >= base_vocab_size]
    emb_grad = gpt.text_embedding.weight.grad
    if emb_grad is None or not bool(emb_grad[used].abs().sum(dim=-1).gt(0).all()):
        raise _no_gradient(base_vocab_size, "text_embedding")
    head_grad = gpt.text_head.weight.grad
    # the loss must reach the head at all (a text loss weight of 0 would not), and every new row must be
    # connected to it; a connected row whose loss gradient is exactly 0 is below fp16's range for this batch
    if head_grad is None or not bool(head_grad.abs().sum().gt(0)) or not bool(connected.all()):
        raise _no_gradient(base_vocab_size, "text_head")
    underflowed = int((~head_grad[base_vocab_size:].abs().sum(dim=-1).gt(0)).sum())
    if underflowed:
        log.info("pre-flight: %d of %d new text_head rows get a gradient of exactly 0 from this batch at loss scale "
                 "%g (below the autocast dtype's range: their logits are far below the targets'); all are "
                 "connected to the loss", underflowed, rows - base_vocab_size, scale)
    log.info("pre-flight: gradients reach the %d new token rows (%d used by the check batch)",
             rows - base_vocab_size, used.numel())
