"""Stop at the best, and notice overfitting: two small judges fed one score per evaluation.

Both are pure (no torch, no files): the recipe feeds them after each evaluation and saves their
``state_dict`` in the checkpoint (``TrainingState.early_stopping``), so a resumed run continues the
patience count and does not warn twice.

* :class:`EarlyStopping` (``training.early_stopping``): a score counts as an improvement when it is
  at least ``min_improvement`` below the best so far; after ``patience`` evaluations in a row
  without one, it answers "stop". Lower is better, as every ``best_metric`` score is. Its best is
  the best by ``checkpoint_store.is_better``, the rule that picks the best checkpoint: any lower score
  is the new best, also one too small to count as an improvement (so with the metric of
  ``checkpoint.best_metric`` the step it names is the checkpoint kept as best).
* :class:`OverfitDetector` (``training.overfit_warning_evals``), independent of early stopping
  (it warns a run that does not stop): the eval score has been worse than its best for N
  evaluations in a row while the mean training loss kept falling over the same evaluations:
  the model is learning the training clips, not the task. It fires once per run.

A score of None (a metric that this evaluation could not compute) is neither better nor worse: it
is skipped, so a failed recogniser call never stops a run.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Mapping, Optional

from xtts_ft.checkpoint_store import CheckpointStore, is_better, score_of
from xtts_ft.config import TrainingConfig
from xtts_ft.train.metrics import MetricsLogger
from xtts_ft.training_state import EvaluationState, JudgesState, OverfitFinding, OverfitState, StopperState

log = logging.getLogger(__name__)


def stopping_metric(early_metric: str, best_metric: str) -> str:
    """The metric early stopping watches: ``best_metric`` follows ``checkpoint.best_metric``."""
    return best_metric if early_metric == "best_metric" else early_metric


@dataclass
class EarlyStopping:
    """Patience counter over evaluation scores (lower is better)."""

    patience: int
    min_improvement: float = 0.0
    best_score: Optional[float] = None
    best_step: Optional[int] = None
    evals_without_improvement: int = 0
    metric: str = "eval_loss"  # what the scores are (they come scored: is_better only compares them)

    def update(self, step: int, score: Optional[float]) -> bool:
        """Record the evaluation of ``step``; True when the run should stop now."""
        if score is None:
            return False
        improved = is_better(self.metric, score, self.best_score, by=self.min_improvement)
        if is_better(self.metric, score, self.best_score):  # the best checkpoint's rule: any lower score
            self.best_score, self.best_step = float(score), int(step)
        self.evals_without_improvement = 0 if improved else self.evals_without_improvement + 1
        return self.should_stop

    @property
    def should_stop(self) -> bool:
        return self.evals_without_improvement >= self.patience

    def state_dict(self) -> StopperState:
        return {"best_score": self.best_score, "best_step": self.best_step,
                "evals_without_improvement": self.evals_without_improvement}

    def load_state_dict(self, state: Optional[StopperState]) -> None:
        """Continue a saved count (None: a checkpoint from before early stopping existed: start afresh)."""
        if not state:
            return
        self.best_score = state.get("best_score")
        self.best_step = state.get("best_step")
        self.evals_without_improvement = int(state.get("evals_without_improvement", 0))


@dataclass
class Evaluation:
    step: int
    score: float
    train_loss: Optional[float]  # mean training loss of the steps since the evaluation before

    def state_dict(self) -> EvaluationState:
        return {"step": self.step, "score": self.score, "train_loss": self.train_loss}


@dataclass
class OverfitDetector:
    """Says once when the eval score keeps worsening while the training loss keeps falling."""

    evals: int  # N: evaluations in a row worse than the best; 0 disables the detector
    best: Optional[Evaluation] = None
    since_best: list[Evaluation] = field(default_factory=list)
    finding: Optional[OverfitFinding] = None  # set once, when the detector fires

    def update(self, step: int, score: Optional[float], train_loss: Optional[float]) -> Optional[OverfitFinding]:
        """Record an evaluation; returns the finding (a dict for the event) the first time overfitting shows."""
        if self.evals < 1 or score is None:
            return None
        now = Evaluation(int(step), float(score), train_loss)
        if self.best is None or now.score < self.best.score:
            self.best, self.since_best = now, []
            return None
        self.since_best.append(now)
        if self.finding is not None or len(self.since_best) < self.evals:
            return None
        # "while the training loss falls": lower now than at the best evaluation (or, when that one had no training
        # loss, e.g. the evaluation before step 1, than at the first evaluation after it that had one)
        known = [e for e in [self.best, *self.since_best] if e.train_loss is not None]
        first_loss = known[0].train_loss
        if now.train_loss is None or first_loss is None or known[0] is now or not now.train_loss < first_loss:
            return None
        self.finding = {"at_step": now.step, "best_step": self.best.step, "best_score": self.best.score,
                        "score": now.score, "evals_worse": len(self.since_best),
                        "train_loss_from": known[0].train_loss, "train_loss_to": now.train_loss}
        return self.finding.copy()

    def state_dict(self) -> OverfitState:
        return {"best": self.best.state_dict() if self.best else None,
                "since_best": [e.state_dict() for e in self.since_best], "finding": self.finding}

    def load_state_dict(self, state: Optional[OverfitState]) -> None:
        if not state:
            return
        best = state.get("best")
        self.best = Evaluation(**best) if best else None
        self.since_best = [Evaluation(**e) for e in state.get("since_best", [])]
        self.finding = state.get("finding")


class RunJudges:
    """What the recipe holds: both judges and the training-loss mean between evaluations, saved as one dict.

    ``after_step(loss)`` each optimizer step; ``after_eval(step, metrics)`` each evaluation (``metrics``: the
    evaluation's numbers, as ``checkpoint_store.score_of`` reads them) returns ``(stop, overfit_finding)``.
    """

    def __init__(self, tcfg: TrainingConfig, best_metric: str) -> None:
        cfg = tcfg.early_stopping
        self.metric = stopping_metric(cfg.metric, best_metric)
        self.stopper = EarlyStopping(cfg.patience, cfg.min_improvement, metric=self.metric) if cfg.enabled else None
        self.overfit = OverfitDetector(tcfg.overfit_warning_evals)
        self._loss_sum, self._loss_n = 0.0, 0

    def after_step(self, loss: float) -> None:
        if math.isfinite(loss):
            self._loss_sum += loss
            self._loss_n += 1

    def after_eval(self, step: int, metrics: Optional[Mapping[str, float]]) -> tuple[bool, Optional[OverfitFinding]]:
        score = score_of(self.metric, metrics)
        train_loss = self._loss_sum / self._loss_n if self._loss_n else None
        self._loss_sum, self._loss_n = 0.0, 0
        finding = self.overfit.update(step, score, train_loss)
        if finding is not None and self.overfit.finding is not None:
            self.overfit.finding["metric"] = finding["metric"] = self.metric
        stop = self.stopper.update(step, score) if self.stopper is not None else False
        return stop, finding

    @property
    def best_step(self) -> Optional[int]:
        return self.stopper.best_step if self.stopper is not None else None

    def warn_overfitting(self, finding: OverfitFinding, step: int, metrics: MetricsLogger) -> None:
        """Said once per run (the detector remembers it across resumes): console, events.jsonl, report banner."""
        log.warning("overfitting: %s has been worse than its best (%.4g at step %d) for %d evaluations while the "
                    "training loss fell from %.4g to %.4g; the best checkpoint is step %d. Set "
                    "training.early_stopping.enabled: true, lower training.lr or add data", finding["metric"],
                    finding["best_score"], finding["best_step"], finding["evals_worse"], finding["train_loss_from"],
                    finding["train_loss_to"], finding["best_step"])
        metrics.event(step, "overfitting", **finding)

    def report_early_stop(self, step: int, metrics: MetricsLogger, store: CheckpointStore, best_metric: str) -> None:
        """The run ends here: the console line and the ``early_stop`` event (rank 0 calls it). They name the
        checkpoint kept as best (``store``: the run's ``CheckpointStore``, after this step's save and retention)."""
        stopper, best_checkpoint = self.stopper, store.best(best_metric)
        if stopper is None:  # the recipe only calls this when early stopping ended the run
            raise RuntimeError("report_early_stop without training.early_stopping")
        kept = (f"the best checkpoint (checkpoint.best_metric {best_metric}) is {best_checkpoint}"
                if best_checkpoint is not None else f"no checkpoint has a {best_metric} score")
        log.warning("early stopping at step %d: %s has not improved by %g for %d evaluations; its best was %.4g at "
                    "step %d; %s", step, self.metric, stopper.min_improvement, stopper.evals_without_improvement,
                    stopper.best_score, stopper.best_step, kept)
        metrics.event(step, "early_stop", metric=self.metric, best_step=stopper.best_step,
                      best_score=stopper.best_score, patience=stopper.patience,
                      best_checkpoint=str(best_checkpoint) if best_checkpoint is not None else None)

    def state_dict(self) -> JudgesState:
        return {"stopper": self.stopper.state_dict() if self.stopper is not None else None,
                "overfit": self.overfit.state_dict(), "train_loss": [self._loss_sum, self._loss_n]}

    def load_state_dict(self, state: Optional[JudgesState]) -> None:
        if not state:
            return
        if self.stopper is not None:
            self.stopper.load_state_dict(state.get("stopper"))
        self.overfit.load_state_dict(state.get("overfit"))
        self._loss_sum, self._loss_n = float(state["train_loss"][0]), int(state["train_loss"][1])
