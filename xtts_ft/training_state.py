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
from typing import TYPE_CHECKING, Optional, TypedDict

from xtts_ft.errors import CheckpointError
from xtts_ft.json_types import JsonArray, JsonObject

if TYPE_CHECKING:  # for annotations only: this record is read by commands that never import torch
    import torch

# raise it, and teach from_dict the older one, when the record changes meaning. 2: the best score under
# checkpoint.best_metric is saved (format 1 has none: a resume from it starts with "no best yet")
FORMAT = 2
READABLE_FORMATS = (1, 2)
# Fields added later without changing the meaning of the others: absent in older files, written only when set
# (so an older record read and written again keeps its keys).
ADDED_FIELDS = ("log_interval", "eval_pending", "best_score", "best_step", "early_stopping")


#: A module's or an optimizer's tensors by name, as ``state_dict()`` returns them (CPU tensors in a checkpoint).
TensorState = dict[str, "torch.Tensor"]
#: ``Optimizer.state_dict()`` / ``GradScaler.state_dict()``: torch's own records, handed back to torch unread.
TorchState = dict[str, object]


class SamplerKey(TypedDict):
    """What must not change for a saved data position to mean the same batches (train/session.py ``sampler_key``)."""

    world_size: int
    seed: int
    batch_size: int
    num_clips: int


class SamplerState(SamplerKey):
    """The data position (``epoch``, ``batch_index``: the next batch) and what it means (the sampler key)."""

    epoch: int
    batch_index: int


# A key that may be absent is declared in a TypedDict of total=False below the one with the keys always there
# (typing.NotRequired is Python 3.11's; the package runs on 3.10).
class _RngStateKeys(TypedDict):
    python: JsonArray  # random.getstate(): [version, the Mersenne Twister's words, gauss]
    numpy: JsonArray  # np.random.get_state(): [name, keys, pos, has_gauss, cached]
    torch: torch.Tensor


class RngState(_RngStateKeys, total=False):
    """One rank's random generators (train/rng_state.py): plain lists and byte tensors, weights_only-safe."""

    cuda: torch.Tensor  # on a GPU only


class _IntervalStateKeys(TypedDict):
    n: int
    finite: int
    sums: list[float]
    samples: int
    seconds: float


class IntervalState(_IntervalStateKeys, total=False):
    """The loss running average since the last logged row (train/metrics.py ``interval_state``)."""

    compile: float  # absent in checkpoints written before compile time was counted


class StopperState(TypedDict):
    """Early stopping's patience count (train/early_stopping.py ``EarlyStopping``)."""

    best_score: Optional[float]
    best_step: Optional[int]
    evals_without_improvement: int


class EvaluationState(TypedDict):
    """One evaluation the overfitting detector remembers."""

    step: int
    score: float
    train_loss: Optional[float]


class _OverfitFindingKeys(TypedDict):
    at_step: int
    best_step: int
    best_score: float
    score: float
    evals_worse: int
    train_loss_from: Optional[float]
    train_loss_to: float


class OverfitFinding(_OverfitFindingKeys, total=False):
    """What the overfitting detector found, once per run (an ``overfitting`` event's fields)."""

    metric: str  # the score's metric, added by the judges that own the detector


class OverfitState(TypedDict):
    best: Optional[EvaluationState]
    since_best: list[EvaluationState]
    finding: Optional[OverfitFinding]


class JudgesState(TypedDict):
    """Early stopping and the overfitting detector (train/early_stopping.py ``RunJudges``)."""

    stopper: Optional[StopperState]
    overfit: OverfitState
    train_loss: list[float]  # [sum, count] of the training losses since the last evaluation


@dataclass
class TrainingState:
    """Everything training needs to continue bit-exactly from a step (the GPT is all it trains)."""

    step: int
    epoch: int
    gpt: TensorState  # GPT state dict (CPU tensors)
    sampler: SamplerState  # ResumableBatchSampler position and key (epoch, batch_index, world_size, ...)
    rng: list[RngState]  # one RNG snapshot per rank (train/rng_state.capture_rng)
    stability: dict[str, int]  # StabilityGuard.state_dict(): its counters
    lr_factor: float
    precision: str  # the precision policy the run ended on (fp16 may have fallen back)
    training_config: JsonObject  # the TrainingConfig it ran with (resume logs what changed)
    vocab_fingerprint: str
    base_vocab_size: int
    scaler: TorchState = field(default_factory=dict)
    optimizer: Optional[TorchState] = None  # None: a weights-only checkpoint (checkpoint.optimizer_state)
    first_eval_loss: Optional[float] = None
    best_eval_loss: Optional[float] = None
    last_eval_loss: Optional[float] = None
    best_score: Optional[float] = None  # format 2: the best evaluation's score under checkpoint.best_metric
    best_step: Optional[int] = None  # format 2: the step of that evaluation
    # added without a format change (older files lack them, and read as the defaults):
    log_interval: Optional[IntervalState] = None  # the loss running average since the last logged row (metrics.py)
    eval_pending: bool = False  # the evaluation of this step was cut short by a stop: the resume redoes it
    early_stopping: Optional[JudgesState] = None  # {"stopper", "overfit"} state dicts (train/early_stopping.py)

    def to_dict(self) -> dict[str, object]:
        """The dict written to training_state.pt (no optimizer key for a weights-only checkpoint)."""
        out: dict[str, object] = {"format": FORMAT}
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
