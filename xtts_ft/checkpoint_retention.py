"""What a retention policy keeps: ``checkpoint.keep_last`` / ``keep_best`` / ``optimizer_state: latest``, decided once.

Part of the checkpoint store (xtts_ft/checkpoint_store.py re-exports these names; import them from there).
:meth:`RetentionPolicy.plan` is the pure decision over a run's good checkpoints: the newest ``keep_last`` and
(``keep_best``) the best by ``metric`` stay, the rest go, and (``slim``) every kept one but the newest loses its
optimizer state. :meth:`CheckpointStore.apply_retention` carries the plan out on disk, and
:meth:`RetentionPolicy.peak_on_disk` is what the disk-budget estimate (train/disk_budget.py) counts, so no other
module restates the rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from xtts_ft.checkpoint_record import StoredCheckpoint, best_of
from xtts_ft.config import CheckpointConfig


@dataclass(frozen=True)
class RetentionPlan:
    """What one retention pass does to a run's good checkpoints (oldest first in each list)."""

    remove: list[StoredCheckpoint] = field(default_factory=list)
    slim: list[StoredCheckpoint] = field(default_factory=list)  # kept, rewritten without the optimizer state


@dataclass(frozen=True)
class RetentionPolicy:
    keep_last: int
    keep_best: bool = True
    metric: str = "eval_loss"
    slim: bool = False  # checkpoint.optimizer_state: latest

    @classmethod
    def from_config(cls, section: CheckpointConfig) -> RetentionPolicy:
        """From the ``checkpoint`` config section."""
        return cls(keep_last=section.keep_last, keep_best=section.keep_best, metric=section.best_metric,
                   slim=section.optimizer_state == "latest")

    def plan(self, good: list[StoredCheckpoint], latest: Optional[Path] = None) -> RetentionPlan:
        """The pass over ``good`` (verified, oldest first): which go and which are slimmed; ``latest`` (default: the
        newest) keeps its optimizer state."""
        keep = {c.folder for c in good[-self.keep_last:]}
        best = best_of(good, self.metric) if self.keep_best else None
        if best is not None:
            keep.add(best.folder)
        newest = Path(latest).resolve() if latest is not None else (good[-1].folder.resolve() if good else None)
        remove = [c for c in good if c.folder not in keep]
        slim = [c for c in good if c.folder in keep and self.slim and c.folder.resolve() != newest
                and c.record is not None and c.record.optimizer_state]
        return RetentionPlan(remove, slim)

    def peak_on_disk(self) -> tuple[int, int]:
        """(checkpoints with optimizer state, weights-only ones) on the disk at the fullest moment of a save.

        Without ``slim``: the ``keep_last`` kept, the best, and the one being written before the oldest goes.
        With ``slim``: the new latest (full) is written while the previous latest is still full; then the previous
        one is rewritten weights-only, its new copy staged beside it.
        """
        best = 1 if self.keep_best else 0
        if self.slim:
            return 2, self.keep_last - 1 + best + 1
        return self.keep_last + best + 1, 0


@dataclass
class RetentionOutcome:
    removed: list[Path] = field(default_factory=list)
    slimmed: list[Path] = field(default_factory=list)
    damaged: list[Path] = field(default_factory=list)  # left in place for the user to inspect
