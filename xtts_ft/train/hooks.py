"""What the training recipe calls out to: the evaluation hook, and the seams tests use.

Production code passes an :data:`EvalHook` (the pipeline's sample synthesis) and nothing else;
:class:`TrainingHooks` groups the seams only tests and benchmarks fill in (a ready tokenizer, a
model factory that copies a prebuilt model, a fault injector), so the recipe's signature does not
carry them one by one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional

if TYPE_CHECKING:
    from xtts_ft.model import XttsTrainingModel

#: ``hook(step, model) -> metrics``: called on rank 0 after each evaluation (xtts_ft.evaluate.hook builds it).
EvalHook = Callable[[int, "XttsTrainingModel"], dict]
#: Tests only: ``step -> "loss_nan" | "grad_nan" | None``, a fault to inject into that step.
FaultInjector = Callable[[int], Optional[str]]


@dataclass(frozen=True)
class TrainingHooks:
    """Test seams of the recipe; every field None means "build it the production way"."""

    tokenizer: Optional[Any] = None  # an AmharicTokenizer (default: make_tokenizer from the config)
    model_factory: Optional[Callable[..., XttsTrainingModel]] = None  # (base, vocab_path, tokenizer) -> model
    fault_injector: Optional[FaultInjector] = None
