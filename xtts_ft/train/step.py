"""One optimizer step of the recipe (``StepRunner.run``), and the model inputs of a batch.

1. ``lr = get_lr(step) * lr_factor`` on every param group (a pure function of the step);
2. ``grad_accum_steps`` micro-batches: forward through the (DDP) wrapper under the precision
   policy's autocast, ``scaler.scale(loss / accum).backward()`` (DDP all-reduces on the last one);
   a micro-batch that runs out of GPU memory is split in halves or its clip skipped (``oom.py``);
   a stop request between micro-batches abandons the step (``stopping.StopCoordinator``);
3. ``scaler.unscale_``, then clip to ``grad_clip`` (the norm is of unscaled gradients);
4. one fetch of losses, finite-loss count, grad norm and loss scale (the step's only sync);
5. all finite: ``optimizer.step()`` (+ the new-token row LR correction) and ``scaler.update()``;
   otherwise the step is skipped and counted (the stability controller); ``zero_grad``.

Injected faults (tests) come from the hooks object (``hooks.py``), asked once per step.
``compile_times``: of the newest step, the seconds ``training.compile`` spent compiling in it and the
compile time still expected (``XttsTrainingModel.compile_seconds`` / ``pending_compile_seconds``), for
the metrics line and its ETA.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from xtts_ft.config import TrainingConfig
from xtts_ft.train.codes_cache import codes_for_batch
from xtts_ft.train.hooks import TrainingHooks
from xtts_ft.train.oom import MicroBatchRunner
from xtts_ft.train.progress import Progress
from xtts_ft.train.schedule import get_lr, set_lr
from xtts_ft.train.session import BatchPlan, Optimisation
from xtts_ft.train.stability import StepStats, fetch_step_stats
from xtts_ft.train.stability_control import StabilityController
from xtts_ft.train.stopping import StopCoordinator


def model_inputs(model, device: torch.device, batch: dict, *, train: bool) -> dict:
    """A collated batch -> XttsTrainingModel.forward arguments on the device (prompt mels and codes in fp32)."""
    nb = device.type == "cuda"
    to = lambda t: t.to(device, non_blocking=nb)  # noqa: E731
    codes = to(batch["codes"]) if "codes" in batch else codes_for_batch(model, to(batch["wav"]))
    return {"text_inputs": to(batch["padded_text"]), "text_lengths": to(batch["text_lengths"]),
            "audio_codes": codes, "wav_lengths": to(batch["wav_lengths"]),
            "cond_mels": model.conditioning_mels(to(batch["conditioning"])),
            "cond_idxs": to(batch["cond_idxs"]) if train else None, "cond_lens": None}


@dataclass
class StepRunner:
    """Everything one optimizer step touches, built once by the recipe's setup."""

    tcfg: TrainingConfig
    plan: BatchPlan
    opt: Optimisation
    stability: StabilityController
    stop: StopCoordinator
    hooks: TrainingHooks
    model: Any  # XttsTrainingModel (inputs) and its (DDP) wrapper (forward)
    ddp_model: Any
    dist: Any
    device: torch.device
    runner: MicroBatchRunner
    sampler: Any  # ResumableBatchSampler: the data position after each batch
    train_iter: Any  # the training loader's batches (None after cleanup: ends its workers)
    metrics: Any
    lr: float = 0.0  # of the newest step, for its metrics line
    compile_times: dict = field(default_factory=dict)  # of the newest step: MetricsLogger.train_step's compile_*

    def run(self, progress: Progress) -> Optional[StepStats]:
        """One step from ``progress`` (its data position moves on); None when a stop abandoned it."""
        accum, step, opt, stability = self.plan.grad_accum_steps, progress.step, self.opt, self.stability
        lr = get_lr(step, self.tcfg) * progress.lr_factor
        set_lr(opt.optimizer, lr)
        fault = self.hooks.fault_at(step)
        rows, kept_inputs, kept_clips = [], [], []
        compiled_before = self.model.compile_seconds

        def forward(piece: dict) -> tuple[torch.Tensor, torch.Tensor]:
            inputs = model_inputs(self.model, self.device, piece, train=True)
            with stability.policy.autocast():
                # a copy of cond_idxs: the GPT edits it in place
                out = self.ddp_model(**{**inputs, "cond_idxs": inputs["cond_idxs"].clone()})
            loss = self.hooks.corrupt_loss(fault, out["loss"])
            kept_inputs.append(inputs)
            kept_clips.extend(piece["clips"].tolist())
            return loss, torch.stack([loss.detach(), out["loss_text_ce"].detach(), out["loss_mel_ce"].detach()])

        self.runner.begin()  # an out-of-memory micro-batch is split or skipped (oom.py)
        start = self.stop.step_start(progress.data_position, self.device)
        for micro in range(accum):
            restored = self.stop.abandon_step(start, step, micro, accum, self.device)
            if restored is not None:
                opt.optimizer.zero_grad(set_to_none=True)
                progress.data_position = restored
                return None
            batch = next(self.train_iter)
            progress.data_position = self.sampler.next_position(*batch["position"])
            last = micro == accum - 1
            sync = self.ddp_model.no_sync() if (self.dist.enabled and not last) else contextlib.nullcontext()
            with sync:
                row = self.runner.run(batch, 1.0 / (len(batch["clips"]) * accum), forward,
                                      lambda loss: stability.scaler.scale(loss).backward(), step=step)
            if row is not None:
                rows.append(row)
        for event in self.runner.events:
            self.metrics.event(step + 1, **event)
        self.lr = lr
        self.compile_times = {"compile_s": self.model.compile_seconds - compiled_before,
                              "compile_pending_s": self.model.pending_compile_seconds()}
        if not self.runner.finish([p.grad for p in opt.trainable]):  # every clip ran out of memory: no update
            opt.optimizer.zero_grad(set_to_none=True)
            nan = float("nan")
            return StepStats(loss=nan, loss_text_ce=nan, loss_mel_ce=nan, finite_losses=0, expected_losses=0,
                             grad_norm=0.0, loss_scale=float(stability.scaler.get_scale()),
                             stop_requested=self.stop.requested)
        self.hooks.corrupt_grads(fault, opt.trainable)
        stability.scaler.unscale_(opt.optimizer)
        if self.tcfg.grad_clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(opt.trainable, self.tcfg.grad_clip)
        else:
            norm = torch.nn.utils.get_total_norm([p.grad for p in opt.trainable if p.grad is not None])
        stop_flag = torch.full((1,), float(self.stop.requested), device=self.device)
        stats = fetch_step_stats(rows, norm, stability.scale_tensor(), stop_flag,
                                 all_reduce=self.dist.all_reduce_sum if self.dist.enabled else None,
                                 world_size=self.dist.world_size)
        stability.apply_step(stats, self._optimizer_step, kept_inputs, kept_clips)
        opt.optimizer.zero_grad(set_to_none=True)
        return stats

    def _optimizer_step(self) -> None:
        self.opt.new_rows.before_step()
        self.opt.optimizer.step()
        self.opt.new_rows.after_step()
