"""Where a training run stands: step, data position, LR factor, and what its evaluations said.

:class:`Progress` is the part of the recipe that a checkpoint must carry for a resumed run to behave as
if it had never stopped. Its ``state_dict()`` keys are fields of the checkpoint's ``TrainingState``
(xtts_ft/training_state.py), so saving is ``TrainingState(**progress.state_dict(), ...)`` and resuming is
``Progress.from_checkpoint(state, ...)``. The best score under ``checkpoint.best_metric`` is among them: a
resumed run compares its next evaluation with the best one before the stop, not with nothing.

One owner: a Progress is frozen, and the recipe (train/loop.py) is the only code that replaces it. The step
(train/step.py) and the stability controller (train/stability_control.py) return what happened as small
frozen results (a finished or abandoned step and the data position after it, a skipped step, a rollback to
step N) and the recipe applies them (tests/train/test_progress_owner.py checks it).

"Is this evaluation better?" is answered by :func:`score_and_improvement` only, the same rule the
checkpoint code uses when it picks the best checkpoint folder from disk (lowest score wins, an earlier
step wins a tie), so the in-memory and on-disk answers cannot drift apart.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Mapping, Optional, TypedDict

from xtts_ft.checkpoint_store import is_better, score_of
from xtts_ft.training_state import TrainingState


def score_and_improvement(metric: str, metrics: Mapping[str, float], best: Optional[float]) -> tuple[Optional[float], bool]:
    """(the score of one evaluation under ``metric``, whether it beats ``best``); lower is better, a tie is not.

    The one place the recipe compares scores; it follows the checkpoint code's choice of the best folder.
    """
    score = score_of(metric, metrics)
    return score, is_better(metric, score, best)


class ProgressState(TypedDict):
    """The TrainingState fields :class:`Progress` owns."""

    step: int
    epoch: int
    lr_factor: float
    first_eval_loss: Optional[float]
    best_eval_loss: Optional[float]
    last_eval_loss: Optional[float]
    best_score: Optional[float]
    best_step: Optional[int]
    eval_pending: bool


@dataclass(frozen=True)
class Progress:
    """Counters and evaluation results of one run; everything here but the bookkeeping of this process is saved.

    Frozen: the recipe (train/loop.py) is its one owner and makes a new one for each change
    (``dataclasses.replace``); the step and the stability controller report what happened and the recipe applies it.
    """

    step: int = 0
    data_position: tuple[int, int] = (0, 0)  # sampler (epoch, batch_index) of the next batch
    lr_factor: float = 1.0  # product of the rollbacks' LR cuts (stability.rollback_lr_factor)
    first_eval_loss: Optional[float] = None
    best_eval_loss: Optional[float] = None
    last_eval_loss: Optional[float] = None
    best_score: Optional[float] = None  # the best evaluation under checkpoint.best_metric (lower is better)
    best_step: Optional[int] = None
    # this process's bookkeeping (not saved; a resume sets the first three from the checkpoint it loaded)
    saved_step: int = -1  # the step of the newest checkpoint written or loaded
    eval_cut_short: int = -1  # the step whose evaluation a stop abandoned (saved as eval_pending)
    redo_eval: bool = False  # resumed from a checkpoint whose evaluation a stop abandoned
    last_eval_step: int = -1
    last_eval_metrics: Mapping[str, float] = field(default_factory=dict)

    @property
    def epoch(self) -> int:
        return self.data_position[0]

    def state_dict(self) -> ProgressState:
        """The TrainingState fields this object owns (the sampler's own state is saved beside them)."""
        return {"step": self.step, "epoch": self.epoch, "lr_factor": self.lr_factor,
                "first_eval_loss": self.first_eval_loss, "best_eval_loss": self.best_eval_loss,
                "last_eval_loss": self.last_eval_loss, "best_score": self.best_score, "best_step": self.best_step,
                "eval_pending": self.eval_cut_short == self.step}

    @classmethod
    def from_checkpoint(cls, state: TrainingState, *, metric: str, position: tuple[int, int]) -> Progress:
        """Where a checkpoint's TrainingState left off; ``position``: the data position resume settled on.

        A checkpoint from before the best score was saved reads as "no best yet", except under
        ``eval_loss``, whose best it always carried (as ``best_eval_loss``).
        """
        best_score = state.best_score
        if best_score is None and metric == "eval_loss":
            best_score = state.best_eval_loss
        return cls(step=int(state.step), saved_step=int(state.step), data_position=(int(position[0]), int(position[1])),
                   lr_factor=float(state.lr_factor), first_eval_loss=state.first_eval_loss,
                   best_eval_loss=state.best_eval_loss, last_eval_loss=state.last_eval_loss, best_score=best_score,
                   best_step=state.best_step, redo_eval=bool(state.eval_pending))

    def with_evaluation(self, eval_loss: float, metrics: Mapping[str, float], metric: str) -> tuple[Progress, bool]:
        """(this progress with a finished, finite evaluation of its step noted, whether it is the best so far under
        ``metric``)."""
        score, better = score_and_improvement(metric, {**metrics, "eval_loss": eval_loss}, self.best_score)
        best_eval = eval_loss if self.best_eval_loss is None or eval_loss < self.best_eval_loss else self.best_eval_loss
        return dataclasses.replace(
            self, last_eval_loss=eval_loss, last_eval_metrics=dict(metrics),
            first_eval_loss=eval_loss if self.first_eval_loss is None else self.first_eval_loss,
            best_eval_loss=best_eval, best_score=score if better else self.best_score,
            best_step=self.step if better else self.best_step), better
