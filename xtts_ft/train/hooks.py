"""What the training recipe calls out to: the evaluation hook (the pipeline's sample synthesis).

Tests change the recipe's behaviour by patching module-level names (the model builder
``xtts_ft.train.session.build_training_model``, the step's ``forward_losses`` / ``unscale_and_clip``,
see tests/fixtures/faults.py), not through seams kept in production code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Mapping, Optional

if TYPE_CHECKING:
    from xtts_ft.model import XttsTrainingModel

#: ``hook(step, model) -> metrics``: called on rank 0 after each evaluation (xtts_ft.evaluate.hook builds it); of what
#: it returns, the numbers are kept (train/evaluation.py ``run_eval_hook``).
EvalHook = Callable[[int, "XttsTrainingModel"], Optional[Mapping[str, object]]]
