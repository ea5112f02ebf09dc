"""A checkpoint's record (``meta.json``) and "better by metric": what a checkpoint says about itself.

Part of the checkpoint store (xtts_ft/checkpoint_store.py, which re-exports every name here; import them from
there): :class:`CheckpointRecord` is the one parser and writer of ``meta.json`` (every file this project wrote
reads, tests/assets/checkpoint_format1 included; a damaged one is a one-line :class:`CheckpointError` naming the
folder), and :func:`score_of` / :func:`is_better` decide "better by metric" both for the trainer's in-memory
best and for the store's best on disk. Nothing here lists or moves folders.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Union

from xtts_ft.errors import CheckpointError
from xtts_ft.json_types import JsonMapping, JsonObject
from xtts_ft.layout import META_FILE, CheckpointLayout, is_checkpoint
from xtts_ft.tempfiles import atomic_write
from xtts_ft.training_state import FORMAT

# --- "better by metric" (checkpoint.best_metric) --------------------------------------------------

BEST_METRICS = ("eval_loss", "cer", "cer_similarity", "tail_rate")
SIMILARITY_WEIGHT = 0.5  # cer_similarity: 5 points of CER make up for 0.1 of speaker similarity


def score_of(metric: str, evals: Optional[JsonMapping]) -> Optional[float]:
    """One evaluation's score under ``metric`` (lower is better); None when it lacks the metric or is not finite.

    ``eval_loss``: the teacher-forced eval loss; ``cer``: ``sample_cer``, the samples' character error rate
    as the recogniser hears them; ``cer_similarity``: ``sample_cer + 0.5 * (1 - sample_speaker_similarity)``;
    ``tail_rate``: ``sample_tail_rate``, the share of samples that kept talking after their text.
    """
    if metric not in BEST_METRICS:
        raise ValueError(f"unknown best metric {metric!r}; expected one of {BEST_METRICS}")
    if not evals:
        return None
    if metric == "eval_loss":
        value = evals.get("eval_loss")
    elif metric == "cer":
        value = evals.get("sample_cer")
    elif metric == "tail_rate":
        value = evals.get("sample_tail_rate")
    else:
        cer, sim = evals.get("sample_cer"), evals.get("sample_speaker_similarity")
        value = None if cer is None or sim is None else float(cer) + SIMILARITY_WEIGHT * (1.0 - float(sim))
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


Scored = Union[None, float, JsonMapping]  # a score already computed, or an evaluation to score


def is_better(metric: str, new: Scored, old: Scored, *, by: float = 0.0) -> bool:
    """Whether ``new`` beats ``old`` under ``metric``: a missing or non-finite score is never better, and
    anything scored beats nothing. Each side is a score (float) or an evaluation's metrics (scored here).
    ``by``: how much lower ``new`` must be (early stopping's ``min_improvement``; 0: any lower score, the rule
    that picks the best checkpoint)."""
    new_score = _as_score(metric, new)
    if new_score is None:
        return False
    old_score = _as_score(metric, old)
    return old_score is None or new_score < old_score - by


def _as_score(metric: str, value: Scored) -> Optional[float]:
    if isinstance(value, Mapping):
        return score_of(metric, value)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


# --- the record (meta.json) ------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckpointRecord:
    """What ``meta.json`` says about a checkpoint folder; the file's one reader and writer."""

    step: int
    state_sha256: Optional[str]  # sha256 of training_state.pt; None only in folders other tools wrote
    format: int = FORMAT
    epoch: Optional[int] = None
    run_id: Optional[str] = None  # the run that wrote it (run_folder.RunRecord.owns)
    vocab_fingerprint: Optional[str] = None
    base_model: Optional[str] = None
    base_vocab_size: Optional[int] = None
    precision: Optional[str] = None
    eval_loss: Optional[float] = None  # None: this step was not evaluated (or its loss was not finite)
    eval_metrics: Optional[JsonObject] = None
    eval_pending: bool = False  # its evaluation was cut short by a stop; the resume redoes it
    optimizer_state: bool = True  # False: weights-only (slimmed by retention); resuming it restarts AdamW
    created: str = ""
    extra: JsonObject = field(default_factory=dict)  # keys this version does not know, written back as read

    # the JSON names of fields whose attribute name differs
    _JSON_NAMES = {"state_sha256": "training_state_sha256"}

    @property
    def evaluations(self) -> JsonObject:
        """The eval results to score (eval_loss included), for :func:`score_of`."""
        return dict(self.eval_metrics or {}, eval_loss=self.eval_loss)

    def score(self, metric: str) -> Optional[float]:
        return score_of(metric, self.evaluations)

    def to_json(self) -> JsonObject:
        out: JsonObject = dict(self.extra)
        for f in dataclasses.fields(self):
            if f.name != "extra":
                out[self._JSON_NAMES.get(f.name, f.name)] = getattr(self, f.name)
        return out

    @classmethod
    def from_json(cls, data: object, source: str) -> CheckpointRecord:
        """Read a parsed meta.json; anything that is not one is a CheckpointError naming ``source``."""
        if not isinstance(data, dict):
            raise CheckpointError(f"{source}: not a checkpoint record (a JSON object); the checkpoint is damaged, "
                                  f"use an earlier one")
        known = {cls._JSON_NAMES.get(f.name, f.name): f.name for f in dataclasses.fields(cls) if f.name != "extra"}
        values = {known[k]: v for k, v in data.items() if k in known}
        step = values.get("step")
        if isinstance(step, bool) or not isinstance(step, int):
            raise CheckpointError(f"{source}: no step number; the checkpoint is damaged, use an earlier one")
        values.setdefault("state_sha256", None)
        for name in ("optimizer_state", "eval_pending"):
            values[name] = bool(values.get(name, name == "optimizer_state"))
        if not isinstance(values.get("eval_metrics"), (dict, type(None))):
            values["eval_metrics"] = None
        return cls(**values, extra={k: v for k, v in data.items() if k not in known})

    @classmethod
    def read(cls, folder: Path) -> CheckpointRecord:
        """The record of ``folder``; a missing or damaged meta.json is one CheckpointError line naming it."""
        path = CheckpointLayout(folder).meta
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise CheckpointError(
                f"{folder}: no {META_FILE}; not a checkpoint folder (or its save was interrupted)") from None
        except (json.JSONDecodeError, UnicodeDecodeError, OSError) as exc:
            raise CheckpointError(f"{path}: unreadable ({exc}); the checkpoint is damaged, use an earlier one") from None
        return cls.from_json(data, str(path))

    @classmethod
    def find(cls, folder: Path) -> Optional[CheckpointRecord]:
        """:meth:`read`, or None when ``folder`` has no meta.json at all (e.g. a coqui-trainer folder)."""
        return cls.read(folder) if is_checkpoint(folder) else None

    def write(self, folder: Path) -> None:
        atomic_write(CheckpointLayout(folder).meta, json.dumps(self.to_json(), indent=2, default=str), durable=True)


@dataclass(frozen=True)
class StoredCheckpoint:
    """One checkpoint folder of a store, as listed: its step (from the folder name) and its record."""

    step: int
    folder: Path
    record: Optional[CheckpointRecord]  # None: its meta.json is damaged


Owner = Callable[[Optional[CheckpointRecord]], bool]  # whether a checkpoint belongs to the current run


def best_of(checkpoints: list[StoredCheckpoint], metric: str) -> Optional[StoredCheckpoint]:
    """The checkpoint that :func:`is_better` than all others under ``metric`` (the earliest on a tie); None when
    none has a score. ``checkpoints``: verified ones, oldest first."""
    best: Optional[StoredCheckpoint] = None
    for c in checkpoints:
        if c.record is not None and is_better(metric, c.record.evaluations,
                                              best.record.evaluations if best and best.record else None):
            best = c
    return best
