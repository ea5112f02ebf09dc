"""What the training recipe calls out to: the evaluation hook, and the seams tests use.

Production code passes an :data:`EvalHook` (the pipeline's sample synthesis) and nothing else;
:class:`TrainingHooks` groups the seams only tests and benchmarks fill in (a model factory that copies
a prebuilt model, a fault injector), so the recipe's signature does not
carry them one by one. What an injected fault does to a step lives here too (``fault_at``,
``corrupt_loss``, ``corrupt_grads``), so the recipe's ``train_step`` only passes the step's values through.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional

import torch

if TYPE_CHECKING:
    from xtts_ft.model import XttsTrainingModel

#: ``hook(step, model) -> metrics``: called on rank 0 after each evaluation (xtts_ft.evaluate.hook builds it).
EvalHook = Callable[[int, "XttsTrainingModel"], dict]
#: Tests only: ``step -> "loss_nan" | "grad_nan" | None``, a fault to inject into that step.
FaultInjector = Callable[[int], Optional[str]]


@dataclass(frozen=True)
class TrainingHooks:
    """Test seams of the recipe; every field None means "build it the production way"."""

    model_factory: Optional[Callable[..., XttsTrainingModel]] = None  # (base, vocab_path, tokenizer) -> model
    fault_injector: Optional[FaultInjector] = None

    def fault_at(self, step: int) -> Optional[str]:
        """The fault to inject into the optimizer step after ``step`` (asked once per step: injectors may act)."""
        return self.fault_injector(step) if self.fault_injector is not None else None

    @staticmethod
    def corrupt_loss(fault: Optional[str], loss: torch.Tensor) -> torch.Tensor:
        """``loss_nan``: every micro-batch's loss becomes NaN (the step must be skipped)."""
        return loss * float("nan") if fault == "loss_nan" else loss

    @staticmethod
    def corrupt_grads(fault: Optional[str], params: list) -> None:
        """``grad_nan``: one gradient entry becomes NaN after the backward passes (before unscaling)."""
        if fault == "grad_nan":
            params[0].grad.view(-1)[0] = float("nan")
