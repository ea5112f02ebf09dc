"""What a checkpoint's training_state.pt holds: one typed, versioned record.

It sits beside the store that writes and reads it (xtts_ft/checkpoint_store.py: save, load_state,
retention's slimming), below train/ and evaluate/; the file itself stays a plain dict of
tensors, lists and numbers, so ``torch.load(weights_only=True)`` reads it and nothing in it can
run code. ``to_dict`` writes exactly the keys below; ``from_dict`` reads every format this project
has written (``FORMAT``; checkpoints of format 1 written before this record existed included, see
tests/assets/checkpoint_format1) and names the file when one is not a training state.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional

from xtts_ft.errors import CheckpointError

# raise it, and teach from_dict the older one, when the record changes meaning. 2: the best score under
# checkpoint.best_metric is saved (format 1 has none: a resume from it starts with "no best yet")
FORMAT = 2
READABLE_FORMATS = (1, 2)
# Fields added later without changing the meaning of the others: absent in older files, written only when set
# (so an older record read and written again keeps its keys).
ADDED_FIELDS = ("log_interval", "eval_pending", "best_score", "best_step", "early_stopping")


@dataclass
class TrainingState:
    """Everything training needs to continue bit-exactly from a step (the GPT is all it trains)."""

    step: int
    epoch: int
    gpt: dict[str, Any]  # GPT state dict (CPU tensors)
    sampler: dict[str, Any]  # ResumableBatchSampler position and key (epoch, batch_index, world_size, ...)
    rng: list[dict]  # one RNG snapshot per rank (train/rng_state.capture_rng)
    stability: dict[str, Any]  # StabilityGuard.state_dict()
    lr_factor: float
    precision: str  # the precision policy the run ended on (fp16 may have fallen back)
    training_config: dict[str, Any]  # the TrainingConfig it ran with (resume logs what changed)
    vocab_fingerprint: str
    base_vocab_size: int
    scaler: dict[str, Any] = field(default_factory=dict)
    optimizer: Optional[dict[str, Any]] = None  # None: a weights-only checkpoint (checkpoint.optimizer_state)
    first_eval_loss: Optional[float] = None
    best_eval_loss: Optional[float] = None
    last_eval_loss: Optional[float] = None
    best_score: Optional[float] = None  # format 2: the best evaluation's score under checkpoint.best_metric
    best_step: Optional[int] = None  # format 2: the step of that evaluation
    # added without a format change (older files lack them, and read as the defaults):
    log_interval: Optional[dict[str, Any]] = None  # the loss running average since the last logged row (metrics.py)
    eval_pending: bool = False  # the evaluation of this step was cut short by a stop: the resume redoes it
    early_stopping: Optional[dict[str, Any]] = None  # {"stopper", "overfit"} state dicts (train/early_stopping.py)

    def to_dict(self) -> dict[str, Any]:
        """The dict written to training_state.pt (no optimizer key for a weights-only checkpoint)."""
        out: dict[str, Any] = {"format": FORMAT}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "optimizer" and value is None:
                continue
            if f.name in ADDED_FIELDS and value == f.default:  # an older record read and written again stays as it was
                continue
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data: object, source: str) -> TrainingState:
        """Read a training_state.pt dict; anything else raises CheckpointError naming ``source``."""
        if not isinstance(data, dict) or data.get("format") not in READABLE_FORMATS:
            found = data.get("format") if isinstance(data, dict) else type(data).__name__
            readable = " or ".join(str(f) for f in READABLE_FORMATS)
            raise CheckpointError(
                f"{source}: not a training state of format {readable} (found {found!r}); start a new run dir"
            )
        names = {f.name for f in dataclasses.fields(cls)}
        required = {f.name for f in dataclasses.fields(cls)
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
        missing = sorted(required - set(data))
        if missing:
            raise CheckpointError(f"{source}: training state without {', '.join(missing)}; the file is damaged")
        if not isinstance(data["gpt"], dict):
            raise CheckpointError(f"{source}: 'gpt' is not a state dict; the file is damaged")
        return cls(**{k: v for k, v in data.items() if k in names})

    def without_optimizer(self) -> TrainingState:
        return dataclasses.replace(self, optimizer=None)
