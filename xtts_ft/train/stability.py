"""Non-finite defence: per-step checks with one host-device sync, rollbacks, and a diagnosis.

Per optimizer step the loop computes on the device: each micro-batch's losses, how many of them are
finite, the total gradient norm after unscaling (inf/NaN if any gradient is), and the loss scale.
:func:`fetch_step_stats` reads them with ONE ``.tolist()``: the only host-device synchronisation the
checks add (in DDP the counts are all-reduced first so every rank takes the same decision).
Then:

- a non-finite loss in any micro-batch: the step is skipped (no optimizer update, the loss scale is
  kept). To stay within one sync per step, its backward pass has already run by the time the flag
  is read; the gradients it produced are discarded with the step (``zero_grad``). Knowing
  before the backward would cost a second sync per micro-batch.
- a non-finite gradient norm (after unscaling): the optimizer step is skipped; under fp16 the
  GradScaler backs off, as it should on an overflow.

:class:`StabilityGuard` counts them. ``max_consecutive_bad_steps`` bad steps in a row trigger a
rollback to :class:`Snapshot` (an in-memory CPU copy of the GPT and the optimizer, refreshed every
``snapshot_every`` good steps, in pinned memory on a GPU; the loss scale is not rolled back) with
the LR multiplied by ``rollback_lr_factor``; the data order continues past the bad batches. After
``max_rollbacks`` rollbacks the run stops with :func:`diagnose_nonfinite`: a replay of the last
bad batch with forward hooks on every GPT module, naming the first module whose output is
non-finite, plus advice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Optional, TypeVar, cast

import torch
import torch.nn as nn

from xtts_ft.config import StabilityConfig
from xtts_ft.train.precision import Autocast
from xtts_ft.training_state import TensorState, TorchState

if TYPE_CHECKING:  # a name for annotations: train/data.py loads soundfile and the tokenizer, unused here
    from xtts_ft.train.data import ModelInputs

# GPT state-dict keys that are not parameters of their own (inference wrapper built by synthesis)
_ALIAS_PREFIXES = ("gpt_inference.", "gpt.wte.")


@dataclass(frozen=True)
class StepStats:
    """Host values of one optimizer step, fetched in one sync."""

    loss: float
    loss_text_ce: float
    loss_mel_ce: float
    finite_losses: int
    expected_losses: int
    grad_norm: float
    loss_scale: float
    stop_requested: bool

    @property
    def loss_ok(self) -> bool:
        return self.finite_losses == self.expected_losses

    @property
    def grad_ok(self) -> bool:
        return math.isfinite(self.grad_norm)

    @property
    def good(self) -> bool:
        return self.loss_ok and self.grad_ok


def fetch_step_stats(
    loss_rows: list[torch.Tensor],
    grad_norm: torch.Tensor,
    scale: torch.Tensor,
    stop_flag: torch.Tensor,
    *,
    all_reduce: Optional[Callable[[torch.Tensor], None]] = None,
    world_size: int = 1,
) -> StepStats:
    """``loss_rows``: one (loss, text_ce, mel_ce) tensor per micro-batch. One host-device sync."""
    rows = torch.stack(loss_rows).float()
    finite = torch.isfinite(rows[:, 0]).sum().float().reshape(1)
    summed = torch.cat([rows.sum(dim=0), finite, stop_flag.float().reshape(1)])
    if all_reduce is not None:
        all_reduce(summed)  # SUM over ranks; the grad norm and scale are already identical on every rank
    values = torch.cat([summed, grad_norm.detach().float().reshape(1), scale.float().reshape(1)]).tolist()  # the sync
    n = rows.shape[0] * world_size
    return StepStats(
        loss=values[0] / n,
        loss_text_ce=values[1] / n,
        loss_mel_ce=values[2] / n,
        finite_losses=int(values[3]),
        expected_losses=n,
        grad_norm=values[5],
        loss_scale=values[6],
        stop_requested=values[4] > 0,
    )


@dataclass
class StabilityGuard:
    """Counters and the skip / rollback / stop decision."""

    cfg: StabilityConfig
    skipped_nonfinite_loss: int = 0
    skipped_nonfinite_grad: int = 0
    consecutive_bad: int = 0
    rollbacks: int = 0
    oom_split: int = 0  # micro-batches split after running out of GPU memory (oom.py)
    oom_skipped: int = 0  # clips whose gradient an out-of-memory error dropped from a step (oom.py)

    @property
    def skipped_steps(self) -> int:
        return self.skipped_nonfinite_loss + self.skipped_nonfinite_grad

    def record(self, stats: StepStats) -> str:
        """'ok', 'skip' (bad step), 'rollback' or 'stop' (too many rollbacks)."""
        if stats.good:
            self.consecutive_bad = 0
            return "ok"
        if not stats.loss_ok:
            self.skipped_nonfinite_loss += 1
        else:
            self.skipped_nonfinite_grad += 1
        self.consecutive_bad += 1
        if self.consecutive_bad < self.cfg.max_consecutive_bad_steps:
            return "skip"
        return "stop" if self.rollbacks >= self.cfg.max_rollbacks else "rollback"

    def note_rollback(self) -> None:
        self.rollbacks += 1
        self.consecutive_bad = 0

    def state_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "cfg"}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        for key, value in state.items():
            if key != "cfg" and hasattr(self, key):
                setattr(self, key, int(value))


def gpt_state_dict(gpt: nn.Module) -> dict[str, torch.Tensor]:
    """The GPT's own tensors (no aliases added by synthesis), detached."""
    return {k: v.detach() for k, v in gpt.state_dict().items() if not k.startswith(_ALIAS_PREFIXES)}


Nested = TypeVar("Nested")  # a tensor, or dicts/lists/tuples of them


def to_cpu(obj: Nested) -> Nested:
    """A deep CPU copy of nested dicts/lists/tuples of tensors (an optimizer state dict)."""
    if isinstance(obj, torch.Tensor):
        return cast(Nested, obj.detach().to("cpu", copy=True))
    if isinstance(obj, dict):
        return cast(Nested, {k: to_cpu(v) for k, v in obj.items()})
    if isinstance(obj, (list, tuple)):
        return cast(Nested, type(obj)(to_cpu(v) for v in obj))
    return obj


def pin_snapshots(device: torch.device) -> bool:
    """Whether the rollback snapshot of a run on ``device`` goes to page-locked (pinned) host memory: on a GPU."""
    return device.type == "cuda" and bool(torch.cuda.is_available())


def _page_locked(like: torch.Tensor) -> torch.Tensor:
    return torch.empty(like.shape, dtype=like.dtype, pin_memory=True)


def _on_device(t: torch.Tensor) -> bool:
    return bool(t.device.type != "cpu")


def _pinned_copy(obj: Nested, old: object) -> Nested:
    """A host copy of nested GPU tensors in pinned buffers, reusing ``old``'s buffers where shape and dtype match.

    Tensors already on the CPU (AdamW's ``step`` counters) are cloned as :func:`to_cpu` does: a restored
    optimizer may keep them as they are, so a reused buffer would be written under it.
    """
    if isinstance(obj, torch.Tensor):
        if not _on_device(obj):
            return cast(Nested, obj.detach().to("cpu", copy=True))
        reuse = isinstance(old, torch.Tensor) and old.shape == obj.shape and old.dtype == obj.dtype
        buffer: torch.Tensor = old if reuse else _page_locked(obj)
        buffer.copy_(obj.detach(), non_blocking=True)  # ordered on the stream before any later kernel
        return cast(Nested, buffer)
    if isinstance(obj, dict):
        old_map = old if isinstance(old, dict) else {}
        return cast(Nested, {k: _pinned_copy(v, old_map.get(k)) for k, v in obj.items()})
    if isinstance(obj, (list, tuple)):
        old_items = old if isinstance(old, (list, tuple)) and type(old) is type(obj) and len(old) == len(obj) \
            else [None] * len(obj)
        return cast(Nested, type(obj)(_pinned_copy(v, o) for v, o in zip(obj, old_items)))
    return obj


class Snapshot:
    """The in-memory rollback target: GPT weights and optimizer state at a good step.

    The loss scaler is deliberately not part of it: the scale measures what fp16 can hold, and a
    rollback that reset it would undo the very back-offs that show a collapse. With the defaults
    (init scale 1024, back-off 0.5, 10 bad steps before a rollback) a reset scale never got below
    ``precision.min_scale`` and the fp16 -> bf16/fp32 switch never fired; kept, it falls through
    ``min_scale`` on the next overflow after the rollback and the switch happens.

    ``pinned`` (:func:`pin_snapshots`: on a GPU): the copy goes to page-locked host buffers, allocated
    once and refilled at every refresh. A full XTTS snapshot is ~5 GB every ``snapshot_every`` steps;
    from pinned memory the device copies at full bus speed and without a staging copy, and runs
    asynchronously (an event marks its end; :meth:`restore` waits for it).
    """

    def __init__(self, pinned: bool = False) -> None:
        self.pinned = pinned
        self.step: Optional[int] = None
        self._gpt: TensorState = {}
        self._optimizer: TorchState = {}
        self._copied: Optional[torch.cuda.Event] = None

    def take(self, step: int, gpt: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        if self.pinned:
            self._gpt = _pinned_copy(gpt_state_dict(gpt), self._gpt)
            self._optimizer = _pinned_copy(optimizer.state_dict(), self._optimizer)
            self._copied = None
            if any(p.is_cuda for p in gpt.parameters()):
                self._copied = torch.cuda.Event()
                self._copied.record()
        else:
            self._gpt = to_cpu(gpt_state_dict(gpt))
            self._optimizer = to_cpu(optimizer.state_dict())
        self.step = step

    def restore(self, gpt: nn.Module, optimizer: torch.optim.Optimizer) -> int:
        if self._copied is not None:
            self._copied.synchronize()
        gpt.load_state_dict(self._gpt, strict=False)
        optimizer.load_state_dict(self._optimizer)
        return int(self.step or 0)


def _nonfinite(obj: object) -> bool:
    if isinstance(obj, torch.Tensor):
        return obj.is_floating_point() and not bool(torch.isfinite(obj).all())
    if isinstance(obj, dict):
        return any(_nonfinite(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return any(_nonfinite(v) for v in obj)
    if hasattr(obj, "to_tuple"):  # transformers ModelOutput
        return _nonfinite(obj.to_tuple())
    return False


def _first_nonfinite_param(named: Iterable[tuple[str, torch.Tensor]]) -> Optional[str]:
    for name, tensor in named:
        if tensor is not None and _nonfinite(tensor):
            return name
    return None


def diagnose_nonfinite(model: nn.Module, batches: list[ModelInputs], autocast: Autocast) -> str:
    """Replay ``batches`` (model keyword inputs) with forward hooks; say where the first non-finite value appears."""
    gpt = model.xtts.gpt
    bad = _first_nonfinite_param(gpt.named_parameters())
    if bad:
        return f"the GPT weight 'xtts.gpt.{bad}' itself holds NaN/Inf (a previous update blew up)"
    for inputs in batches:
        for key, value in inputs.items():
            if _nonfinite(value):
                return f"the model input '{key}' of the failing batch is non-finite (bad audio or a mel/DVAE overflow)"
    first: list[str] = []

    def hook(name: str) -> Callable[[nn.Module, tuple[torch.Tensor, ...], object], None]:
        def fn(_module: nn.Module, _args: tuple[torch.Tensor, ...], output: object) -> None:
            if not first and _nonfinite(output):
                first.append(name)

        return fn

    handles = [m.register_forward_hook(hook(n)) for n, m in gpt.named_modules() if n]
    was_training = gpt.training
    model.train()
    try:
        for inputs in batches:
            args = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
            with autocast():
                loss = model(**args)["loss"]
            if first:
                return f"module 'xtts.gpt.{first[0]}' produced the first non-finite value in the forward pass"
            if _nonfinite(loss):
                return "every GPT module's output is finite but the loss is not (logits overflow in the cross-entropy)"
            gpt.zero_grad(set_to_none=True)
            loss.backward()
            bad = _first_nonfinite_param((n, p.grad) for n, p in gpt.named_parameters())
            gpt.zero_grad(set_to_none=True)
            if bad:
                return f"the forward pass is finite but the gradient of 'xtts.gpt.{bad}' is not (backward overflow)"
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    return "a replay of the last bad batch was finite everywhere: the failure did not reproduce (intermittent overflow)"
