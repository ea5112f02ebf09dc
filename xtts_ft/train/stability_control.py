"""The stability controller: one object for what keeps a run alive through non-finite steps.

It owns the pieces stability.py and precision.py define and decides with them after each step:

- the guard (counts skipped steps; says skip / rollback / stop);
- the in-memory snapshot (GPT weights and optimizer state at a recent good step) a rollback returns to;
  a rollback never reads a checkpoint from disk;
- the GradScaler and the precision policy, and the fp16 -> bf16/fp32 switch when loss scaling collapses
  below ``precision.min_scale``;
- the last bad step's inputs, for the diagnosis that names the first non-finite module when it stops.

The step calls :meth:`StabilityController.apply_step` with its fetched stats (the optimizer steps only when
they are finite); the recipe then calls :meth:`after_step` with the run's step and LR factor, and gets back what
happened: :class:`Kept`, :class:`Skipped` or :class:`RolledBack` (the step and LR factor the run continues
from, which the recipe writes into its :class:`~xtts_ft.train.progress.Progress`); a run that cannot go on
stops with ``TrainingStopped``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, NoReturn, Optional, Union

import torch

from xtts_ft.config import Config
from xtts_ft.errors import TrainingStopped
from xtts_ft.model import XttsTrainingModel
from xtts_ft.train.data import ModelInputs
from xtts_ft.train.metrics import MetricsLogger
from xtts_ft.train.precision import PrecisionPolicy, fallback_policy, make_scaler, scale_tensor
from xtts_ft.train.stability import Snapshot, StabilityGuard, StepStats, diagnose_nonfinite, pin_snapshots
from xtts_ft.training_state import TorchState

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Kept:
    """The step's update stands (every loss and gradient was finite)."""


@dataclass(frozen=True)
class Skipped:
    """The step changed no weight (a non-finite loss or gradient, or a precision switch); the guard counted it."""


@dataclass(frozen=True)
class RolledBack:
    """Too many bad steps in a row: the weights and optimizer state are back at the snapshot of ``to_step``."""

    failed_at: int  # the step that failed last
    to_step: int  # the step the run continues from
    lr_factor: float  # the run's LR factor from now on (the old one x stability.rollback_lr_factor)


#: What :meth:`StabilityController.after_step` found.
StepOutcome = Union[Kept, Skipped, RolledBack]


class StabilityController:
    """Guard, snapshot, loss scaler and precision fallback of one run (see the module doc)."""

    def __init__(self, cfg: Config, device: torch.device, policy: PrecisionPolicy, guard: StabilityGuard, *,
                 model: XttsTrainingModel, optimizer: torch.optim.Optimizer, scaler_state: Optional[TorchState] = None) -> None:
        self.cfg, self.device, self.model, self.optimizer = cfg, device, model, optimizer
        self.policy = policy  # may fall back from fp16 during the run
        self.guard = guard  # loaded from the checkpoint on a resume (resume.apply_checkpoint)
        self.scaler = make_scaler(policy, cfg.precision)
        if scaler_state and self.scaler.is_enabled():
            self.scaler.load_state_dict(scaler_state)
        self.snapshot = Snapshot(pinned=pin_snapshots(device))  # page-locked host memory on a GPU
        self.last_bad: tuple[list[ModelInputs], list[int]] = ([], [])  # inputs and clips of the newest bad step

    def scale_tensor(self) -> torch.Tensor:
        return scale_tensor(self.scaler, self.device)

    def apply_step(self, stats: StepStats, optimizer_step: Callable[[], None], inputs: list[ModelInputs],
                   clips: list[int]) -> None:
        """Step the optimizer when every loss and gradient is finite; otherwise skip it (and back the scale off
        after an overflow; a bad loss leaves the scale as it is)."""
        if stats.good:
            optimizer_step()
            self.scaler.update()
            return
        self.last_bad = (inputs, clips)
        if self.scaler.is_enabled():
            self.scaler.update() if stats.loss_ok else self.scaler.update(new_scale=stats.loss_scale)

    def after_step(self, stats: StepStats, step: int, lr_factor: float, metrics: MetricsLogger,
                   log_line: Callable[[], None], describe_clips: Callable[[list[int]], str]) -> StepOutcome:
        """Judge the finished ``step`` (run at ``lr_factor``): record it (``log_line`` writes its metrics line, after
        a precision switch and before a rollback); then switch precision, roll back to the snapshot, stop (raises
        TrainingStopped), or refresh the snapshot. Returns what happened; the recipe applies a rollback."""
        outcome = self.guard.record(stats)
        pcfg, scfg = self.cfg.precision, self.cfg.stability
        if self.scaler.is_enabled() and not stats.grad_ok and stats.loss_scale * pcfg.backoff_factor < pcfg.min_scale:
            self._switch_precision(stats.loss_scale * pcfg.backoff_factor, step, metrics)
            outcome = "skip"
        log_line()
        if outcome == "rollback":
            back = RolledBack(failed_at=step, lr_factor=lr_factor * scfg.rollback_lr_factor,
                              to_step=self.snapshot.restore(self.model.gpt, self.optimizer))  # the loss scale stays
            self.guard.note_rollback()
            log.warning("%d non-finite steps in a row at step %d: rolled back to the in-memory snapshot of step %d "
                        "with the LR x%g (rollback %d of %d)", scfg.max_consecutive_bad_steps, back.failed_at,
                        back.to_step, back.lr_factor, self.guard.rollbacks, scfg.max_rollbacks)
            metrics.event(back.to_step, "rollback", failed_at=back.failed_at, lr_factor=back.lr_factor)
            return back
        if outcome == "stop":
            self._stop_with_diagnosis(step, lr_factor, metrics, describe_clips)
        if outcome != "ok":
            return Skipped()
        if step - (self.snapshot.step or 0) >= scfg.snapshot_every:
            self.take_snapshot(step)
        return Kept()

    def take_snapshot(self, step: int) -> None:
        self.snapshot.take(step, self.model.gpt, self.optimizer)

    def _switch_precision(self, scale: float, step: int, metrics: MetricsLogger) -> None:
        new = fallback_policy(self.policy, self.device)
        log.critical("loss scale fell to %g, below precision.min_scale=%g: fp16 keeps overflowing. Switching this run "
                     "from %s to %s (set precision.mode: %s to start there)", scale, self.cfg.precision.min_scale,
                     self.policy.name, new.name, new.name)
        metrics.event(step, "precision_switch", old=self.policy.name, new=new.name, loss_scale=scale)
        self.policy = new
        self.scaler = make_scaler(new, self.cfg.precision)  # disabled: bf16 and fp32 need no loss scaling
        self.guard.consecutive_bad = 0

    def _stop_with_diagnosis(self, step: int, lr_factor: float, metrics: MetricsLogger,
                             describe_clips: Callable[[list[int]], str]) -> NoReturn:
        inputs, clips = self.last_bad
        where = diagnose_nonfinite(self.model, inputs, self.policy.autocast)
        files = describe_clips(clips) or "unknown"
        metrics.event(step, "stopped", diagnosis=where)
        raise TrainingStopped(
            f"training stopped at step {step}: {self.guard.consecutive_bad} non-finite steps in a row after "
            f"{self.guard.rollbacks} rollback(s) (stability.max_rollbacks); diagnosis: {where}. Advice: lower "
            f"training.lr (now {self.cfg.training.lr:g} x {lr_factor:g}), set precision.mode: fp32 (now "
            f"{self.policy.name}), and check the data of the failing batch ({files})"
        )
