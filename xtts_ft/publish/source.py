"""What ``publish --model PATH`` names: an export folder, a checkpoint folder or a run folder.

A run folder stands for its best checkpoint (``checkpoint.best_metric`` of the run's config, as the
trainer chose it; the latest checkpoint when no evaluation scored one). A checkpoint is exported
with the existing export code into the folder being published; an export folder is used as it is.
Whichever it was, the run folder behind it (when it is still on this disk) is where the card's
numbers come from: ``samples/index.jsonl`` for the evaluation of that step, ``data/report.json``
for the dataset.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import yaml

from xtts_ft.errors import CheckpointError
from xtts_ft.evaluate.export import EXPORT_META
from xtts_ft.layout import CHECKPOINTS_DIR, RUN_FILE, STATE_FILE, CheckpointLayout, RunLayout

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelSource:
    """The model to publish: an export folder, or a checkpoint still to be exported."""

    export_dir: Optional[Path]  # set for an export folder
    checkpoint_dir: Optional[Path]  # set for a checkpoint (given directly or chosen in a run folder)
    run_dir: Optional[Path]  # the run it came from, when that folder is still here

    @property
    def step(self) -> Optional[int]:
        if self.checkpoint_dir is not None:
            return CheckpointLayout(self.checkpoint_dir).step
        return read_json(self.export_dir / EXPORT_META).get("step")


def read_json(path: Path) -> dict:
    """A JSON object from ``path``; {} when absent or not an object (the card then says "not recorded")."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path}: not valid JSON ({exc}); restore it or publish another folder") from None
    return data if isinstance(data, dict) else {}


def run_dir_of_checkpoint(ckpt_dir: Path) -> Optional[Path]:
    """``<run>/checkpoints/step_N`` -> ``<run>`` when that folder still looks like a run (else None)."""
    ckpt_dir = Path(ckpt_dir).resolve()
    run = ckpt_dir.parent.parent
    if ckpt_dir.parent.name != CHECKPOINTS_DIR:
        return None
    layout = RunLayout(run)
    return run if any(p.exists() for p in (layout.samples_index, layout.data, layout.run_file)) else None


def _best_of_run(run_dir: Path) -> Path:
    from xtts_ft.config import CheckpointConfig
    from xtts_ft.run_folder import read_record
    from xtts_ft.train.checkpoint import best_checkpoint, find_latest_checkpoint

    metric = CheckpointConfig.best_metric
    config = RunLayout(run_dir).config
    if config.is_file():
        try:
            raw = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as exc:
            raise CheckpointError(f"{config}: not valid YAML ({exc}); pass a checkpoint folder instead") from None
        metric = ((raw.get("checkpoint") or {}) if isinstance(raw, dict) else {}).get("best_metric", metric)
    record = read_record(run_dir)
    owner = record.owns if record else None
    best = best_checkpoint(run_dir, owner, metric)
    if best is not None:
        log.info("publish: %s is the best checkpoint of %s by %s", best.name, run_dir, metric)
        return best
    latest = find_latest_checkpoint(run_dir, owner)
    if latest is None:
        raise CheckpointError(f"--model {run_dir}: a run folder without a usable checkpoint; train first, or pass "
                              f"a checkpoint or export folder")
    log.warning("publish: no checkpoint of %s has a %s score; using the latest, %s", run_dir, metric, latest.name)
    return latest


def resolve_source(path: Path) -> ModelSource:
    """Tell what ``path`` is; a wrong path is one line naming it and the three kinds it may be."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"--model {path}: folder not found; give an export folder, a checkpoint folder "
                              f"(runs/NAME/checkpoints/step_N) or a run folder (runs/NAME)")
    if (path / EXPORT_META).is_file():
        meta = read_json(path / EXPORT_META)
        source = meta.get("source_checkpoint")
        run = run_dir_of_checkpoint(Path(source)) if source and Path(source).is_dir() else None
        return ModelSource(export_dir=path, checkpoint_dir=None, run_dir=run)
    if (path / STATE_FILE).is_file():
        return ModelSource(export_dir=None, checkpoint_dir=path, run_dir=run_dir_of_checkpoint(path))
    if (path / CHECKPOINTS_DIR).is_dir() or (path / RUN_FILE).is_file():
        return ModelSource(export_dir=None, checkpoint_dir=_best_of_run(path), run_dir=path)
    raise CheckpointError(f"--model {path}: not an export folder (no {EXPORT_META}), a checkpoint folder (no "
                          f"{STATE_FILE}) or a run folder (no {CHECKPOINTS_DIR}/); give one of those")
