"""Resuming from an older checkpoint starts a branch: the later steps are moved aside, never overwritten.

``--resume RUN/checkpoints/step_000002`` in a run that already saved steps 4 and 6 trains a new
step 4 and 6 from step 2. Those would land in the folders of the old ones (step 6 may be the only
one with optimizer state), so before the first step the old later checkpoints, their sample folders,
and copies of ``metrics.jsonl`` and ``samples/index.jsonl`` as they were go to
``<run_dir>/branches/<date>_after_step_000002/`` (the same layout as the run folder). The run folder
then holds the new branch only: "latest", "best", retention and the report see one history, and the
old branch stays whole beside it, to be exported or resumed from by path. The console and
``events.jsonl`` (a ``branch`` event) say where it went.

Only a checkpoint named by ``checkpoint.resume`` (``--resume PATH``) starts a branch: ``auto`` takes the
newest good checkpoint, so all it may pass over is a damaged one, which stays where it is for inspection.

A save whose step folder holds *another run's* checkpoint moves that one aside too (``keep_foreign_aside``,
into ``old_runs/``): the recipe never overwrites what it did not write.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from xtts_ft.checkpoint_store import CheckpointStore, Owner
from xtts_ft.json_types import JsonValue
from xtts_ft.layout import OLD_RUNS, SAMPLES_DIR, RunLayout, branch_dir_name, step_of
from xtts_ft.run_history import copy_history, truncate_evaluations

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Branch:
    """Later steps of the run, set aside by a resume from ``step``."""

    step: int
    folder: Path  # branches/<date>_after_step_NNNNNN/
    steps: tuple[int, ...]  # the checkpoints moved there

    def event(self) -> dict[str, JsonValue]:
        return {"from_step": self.step, "old_branch": str(self.folder), "moved_steps": list(self.steps)}


def _later_samples(run_dir: Path, step: int) -> list[Path]:
    samples = RunLayout(run_dir).samples
    if not samples.is_dir():
        return []
    return sorted(p for p in samples.iterdir() if p.is_dir() and (step_of(p.name) or -1) > step)


def set_aside_later_steps(run_dir: Path, step: int, owner: Optional[Owner]) -> Optional[Branch]:
    """Move this run's checkpoints (and sample folders) after ``step`` into a new branch folder; None if there are none."""
    layout = RunLayout(run_dir)
    store = CheckpointStore.of_run(run_dir, owner)
    later = [c for c in store.list() if c.step > step]
    samples = _later_samples(run_dir, step)
    if not later and not samples:
        return None
    name = branch_dir_name(time.strftime('%Y%m%d-%H%M%S'), step)
    folder, n = layout.branches / name, 1
    while folder.exists():  # two branches within a second: never mix them
        n += 1
        folder = layout.branches / f"{name}-{n}"
    branch_store = CheckpointStore.of_run(folder)  # the same layout as the run folder
    branch_store.root.mkdir(parents=True)
    (folder / SAMPLES_DIR).mkdir()
    copy_history(run_dir, folder)  # the history as it was (the run's own files keep only the steps up to the branch)
    store.move_aside([c.folder for c in later], into=branch_store.root)
    for path in samples:
        os.replace(path, folder / SAMPLES_DIR / path.name)
    truncate_evaluations(run_dir, step)  # the report lists what the folder holds
    branch = Branch(step=step, folder=folder, steps=tuple(c.step for c in later))
    log.warning("resume from step %d while this run has later checkpoints (%s): they are kept, moved with their "
                "samples to %s; training continues from step %d as a new branch", step,
                ", ".join(str(s) for s in branch.steps) or "none, only samples", folder, step)
    return branch


def set_aside_foreign(run_dir: Path, checkpoint: Path) -> Path:
    """Move a checkpoint of another run out of the way of a save with the same step number (never overwrite it)."""
    dest = Path(run_dir) / OLD_RUNS / f"{time.strftime('%Y%m%d-%H%M%S')}_foreign_checkpoints"
    [moved] = CheckpointStore.of_run(run_dir).move_aside([checkpoint], into=dest)
    log.warning("%s belongs to another run: moved to %s before saving this run's step there", checkpoint, dest)
    return moved


def keep_foreign_aside(run_dir: Path, step: int, owner: Owner) -> None:
    """Before saving ``step``: a folder of that step's name that another run wrote is moved aside."""
    target = CheckpointStore.of_run(run_dir, owner=owner).foreign_at(step)
    if target is not None:
        set_aside_foreign(run_dir, target)
