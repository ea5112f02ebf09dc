"""One optimizer step of the recipe (``StepRunner.run``), and the model inputs of a batch.

The step reads the run's :class:`~xtts_ft.train.progress.Progress` and changes none of it: it returns what
happened (:class:`StepTaken` with the step's stats, or :class:`StepAbandoned`) with the data position the
next step starts from, and the recipe applies that.

1. ``lr = get_lr(step) * lr_factor`` on every param group (a pure function of the step);
2. ``grad_accum_steps`` micro-batches: ``forward_losses`` through the (DDP) wrapper under the precision
   policy's autocast, ``scaler.scale(loss / accum).backward()`` (DDP all-reduces on the last one);
   a micro-batch that runs out of GPU memory is split in halves or its clip skipped (``oom.py``);
   a stop request between micro-batches abandons the step (``stopping.StopCoordinator``);
3. ``unscale_and_clip``: ``scaler.unscale_``, then clip to ``grad_clip`` (the norm is of unscaled gradients);
4. one fetch of losses, finite-loss count, grad norm and loss scale (the step's only sync);
5. all finite: ``optimizer_step`` (+ the new-token row LR correction) and ``scaler.update()``;
   otherwise the step is skipped and counted (the stability controller); ``zero_grad``.

``forward_losses`` and ``unscale_and_clip`` are module-level functions: the step's two numeric seams, which
tests patch to inject a non-finite loss or gradient (tests/fixtures/faults.py); nothing here knows of tests.
``compile_times``: of the newest step, the seconds ``training.compile`` spent compiling in it and the
compile time still expected (``XttsTrainingModel.compile_seconds`` / ``pending_compile_seconds``), for
the metrics line and its ETA.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, Iterator, Optional, Union

import torch

from xtts_ft.model import XttsTrainingModel
from xtts_ft.train.codes_cache import codes_for_batch
from xtts_ft.train.data import Batch, ModelInputs
from xtts_ft.train.oom import MicroBatchRunner
from xtts_ft.train.progress import Progress
from xtts_ft.train.schedule import get_lr, set_lr
from xtts_ft.train.session import MovingParts, Optimisation, Session
from xtts_ft.train.stability import StepStats, fetch_step_stats
from xtts_ft.train.stopping import StopCoordinator


@dataclass(frozen=True)
class StepTaken:
    """A step that ran all its micro-batches: the optimizer stepped, or the stability controller skipped the update
    (``stats.good`` says which)."""

    stats: StepStats
    data_position: tuple[int, int]  # the sampler position the next step starts from


@dataclass(frozen=True)
class StepAbandoned:
    """A stop between micro-batches abandoned the step: no update; its batches are drawn again on resume."""

    data_position: tuple[int, int]  # where the abandoned step started


#: What one call of :meth:`StepRunner.run` did.
StepResult = Union[StepTaken, StepAbandoned]


def model_inputs(model: XttsTrainingModel, device: torch.device, batch: Batch, *, train: bool) -> ModelInputs:
    """A collated batch -> XttsTrainingModel.forward arguments on the device (prompt mels and codes in fp32)."""
    nb = device.type == "cuda"

    def to(t: torch.Tensor) -> torch.Tensor:
        return t.to(device, non_blocking=nb)

    codes = to(batch["codes"]) if "codes" in batch else codes_for_batch(model, to(batch["wav"]))
    return {"text_inputs": to(batch["padded_text"]), "text_lengths": to(batch["text_lengths"]),
            "audio_codes": codes, "wav_lengths": to(batch["wav_lengths"]),
            "cond_mels": model.conditioning_mels(to(batch["conditioning"])),
            "cond_idxs": to(batch["cond_idxs"]) if train else None, "cond_lens": None}


def forward_losses(ddp_model: torch.nn.Module, inputs: ModelInputs,
                   autocast: Callable[[], contextlib.AbstractContextManager[None]]) -> dict[str, torch.Tensor]:
    """One micro-batch's forward under the precision policy's autocast: ``loss``, ``loss_text_ce``, ``loss_mel_ce``."""
    cond_idxs = inputs["cond_idxs"]
    with autocast():  # a copy of cond_idxs: the GPT edits it in place
        out: dict[str, torch.Tensor] = ddp_model(
            **{**inputs, "cond_idxs": cond_idxs.clone() if cond_idxs is not None else None})
    return out


def unscale_and_clip(scaler: torch.amp.GradScaler, optimizer: torch.optim.Optimizer, params: list[torch.nn.Parameter],
                     grad_clip: float) -> torch.Tensor:
    """Unscale the accumulated gradients, clip them to ``grad_clip`` (0: no clipping); their total norm."""
    scaler.unscale_(optimizer)
    if grad_clip > 0:
        return torch.nn.utils.clip_grad_norm_(params, grad_clip)
    return torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])


def optimizer_step(opt: Optimisation) -> None:
    """The update: the optimizer's step between the new-token rows' LR correction."""
    opt.new_rows.before_step()
    opt.optimizer.step()
    opt.new_rows.after_step()


class StepRunner:
    """One optimizer step with what setup built (``session``: the plan, the settings; ``parts``: the model, the
    optimizer and the stability controller it changes); ``stop``: the recipe's stop coordinator, ``runner``: the
    out-of-memory splitting of micro-batches, ``batches``: the training loader's iterator (its workers run
    until :meth:`close`)."""

    def __init__(self, session: Session, parts: MovingParts, *, stop: StopCoordinator, runner: MicroBatchRunner,
                 batches: Iterator[Batch]) -> None:
        self.session, self.parts, self.stop, self.runner = session, parts, stop, runner
        self.batches: Optional[Iterator[Batch]] = batches
        self.lr = 0.0  # of the newest step, for its metrics line
        self.compile_times: dict[str, float] = {}  # of the newest step: MetricsLogger.train_step's compile_*

    def close(self) -> None:
        """Drop the loader's iterator: its worker processes shut down."""
        self.batches = None

    def next_batch(self) -> Batch:
        if self.batches is None:
            raise RuntimeError("StepRunner.close() has run")
        return next(self.batches)

    def run(self, progress: Progress) -> StepResult:
        """One step from ``progress`` (read only): what happened and where the data continues."""
        s, parts = self.session, self.parts
        accum, step, opt, stability, device = s.plan.grad_accum_steps, progress.step, parts.opt, parts.stability, s.device
        lr = get_lr(step, s.training) * progress.lr_factor
        set_lr(opt.optimizer, lr)
        rows: list[torch.Tensor] = []
        kept_inputs: list[ModelInputs] = []
        kept_clips: list[int] = []
        compiled_before = parts.model.compile_seconds

        def forward(piece: Batch) -> tuple[torch.Tensor, torch.Tensor]:
            inputs = model_inputs(parts.model, device, piece, train=True)
            out = forward_losses(parts.ddp_model, inputs, stability.policy.autocast)
            loss = out["loss"]
            kept_inputs.append(inputs)
            kept_clips.extend(piece["clips"].tolist())
            return loss, torch.stack([loss.detach(), out["loss_text_ce"].detach(), out["loss_mel_ce"].detach()])

        def backward(loss: torch.Tensor) -> None:
            stability.scaler.scale(loss).backward()

        self.runner.begin()  # an out-of-memory micro-batch is split or skipped (oom.py)
        position = progress.data_position
        start = self.stop.step_start(position, device)
        for micro in range(accum):
            restored = self.stop.abandon_step(start, step, micro, accum, device)
            if restored is not None:
                opt.optimizer.zero_grad(set_to_none=True)
                return StepAbandoned(data_position=restored)
            batch = self.next_batch()
            position = s.sampler.next_position(*batch["position"])
            last = micro == accum - 1
            sync = parts.ddp_model.no_sync() if (s.dist.enabled and not last) else contextlib.nullcontext()
            with sync:
                row = self.runner.run(batch, 1.0 / (len(batch["clips"]) * accum), forward, backward, step=step)
            if row is not None:
                rows.append(row)
        for event in self.runner.events:
            parts.metrics.event(step + 1, **event)
        self.lr = lr
        self.compile_times = {"compile_s": parts.model.compile_seconds - compiled_before,
                              "compile_pending_s": parts.model.pending_compile_seconds()}
        if not self.runner.finish([p.grad for p in opt.trainable]):  # every clip ran out of memory: no update
            opt.optimizer.zero_grad(set_to_none=True)
            nan = float("nan")
            return StepTaken(StepStats(loss=nan, loss_text_ce=nan, loss_mel_ce=nan, finite_losses=0, expected_losses=0,
                                       grad_norm=0.0, loss_scale=float(stability.scaler.get_scale()),
                                       stop_requested=self.stop.requested), position)
        norm = unscale_and_clip(stability.scaler, opt.optimizer, opt.trainable, s.training.grad_clip)
        stop_flag = torch.full((1,), float(self.stop.requested), device=device)
        stats = fetch_step_stats(rows, norm, stability.scale_tensor(), stop_flag,
                                 all_reduce=s.dist.all_reduce_sum if s.dist.enabled else None,
                                 world_size=s.dist.world_size)
        stability.apply_step(stats, lambda: optimizer_step(opt), kept_inputs, kept_clips)
        opt.optimizer.zero_grad(set_to_none=True)
        return StepTaken(stats, position)
