"""Which model a ``--model PATH`` names: an export folder, a checkpoint folder, or a run folder.

Users point servers at whatever a run left behind; the peers' issue trackers show that a
fine-tuned folder a server cannot load is where serving most often goes wrong. So every
front end (``serve``, Wyoming, the web app's Speak tab) resolves its path here, once, and
is told in one line what the folder is or what was expected instead.

* export folder: ``model.pth`` + ``config.json`` (what ``python -m xtts_ft export`` writes);
* checkpoint folder: a training state (``checkpoints/step_NNNNNN``), loaded with the base
  model named in its checkpoint record (or ``base_model`` given here);
* run folder: ``checkpoints/`` inside it: its best checkpoint by the run's
  ``checkpoint.best_metric`` (``CheckpointStore.best``), else its latest good one
  (``CheckpointStore.latest``); only checkpoints the run owns (``run.json``).

The run folder a model came from (if it can be told) is kept, so the engine can offer the run's
own speakers as voices.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional

import yaml

from xtts_ft.checkpoint_store import BEST_METRICS, CheckpointStore
from xtts_ft.config import CheckpointConfig
from xtts_ft.errors import ModelError
from xtts_ft.inference.checkpoint_folder import base_for_checkpoint
from xtts_ft.inference.loading import LoadedModel, load_checkpoint_folder, load_export
from xtts_ft.layout import CONFIG_FILE, RUN_FILE, STATE_FILE, RunLayout
from xtts_ft.model_folder import EXPORT_FILES, ModelFolder, is_export
from xtts_ft.run_folder import read_record

log = logging.getLogger(__name__)

ModelKind = Literal["export", "checkpoint", "run"]


@dataclass(frozen=True)
class ResolvedModel:
    """What a ``--model`` path turned out to be, and where the loadable model is."""

    kind: ModelKind  # what the user passed
    given: Path  # the path as given
    model_dir: Path  # the loadable folder: an export folder or a checkpoint folder
    loads_as: Literal["export", "checkpoint"]  # how model_dir is loaded
    run_dir: Optional[Path]  # the run folder the model came from, when it can be told (voices, config)
    base_model: Optional[str] = None  # checkpoint only: base model folder or repo id (None: from its checkpoint record)
    chosen_by: str = ""  # run only: "best (eval_loss)" or "latest"

    def describe(self) -> str:
        """One line for logs and the server's /health: what was given and what is loaded."""
        if self.kind == "run":
            return f"run folder {self.given}: {self.chosen_by} checkpoint {self.model_dir.name}"
        return f"{self.kind} folder {self.model_dir}"

    def load(self, device: str = "cpu") -> LoadedModel:
        """(xtts, tokenizer, meta) with the project's loaders (``xtts_ft.inference.loading``)."""
        if self.loads_as == "export":
            return load_export(self.model_dir, device=device)
        base = base_for_checkpoint(self.model_dir, self.base_model)
        return load_checkpoint_folder(self.model_dir, base, device=device)


def _run_of_checkpoint(ckpt: Path) -> Optional[Path]:
    """``<run>/checkpoints/step_N`` -> ``<run>``, when that looks like a run folder."""
    run_dir = CheckpointStore.run_dir_of(ckpt)
    return run_dir if run_dir is not None and RunLayout(run_dir).config.is_file() else None


def _run_of_export(export: Path) -> Optional[Path]:
    """An export records the checkpoint it came from; its run folder, if it still exists here."""
    try:
        meta = json.loads(ModelFolder(export).export_meta.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    source = meta.get("source_checkpoint") if isinstance(meta, dict) else None
    if not isinstance(source, str) or not Path(source).is_dir():
        return None
    return _run_of_checkpoint(Path(source))


def _best_metric(run_dir: Path) -> str:
    """The run's ``checkpoint.best_metric`` from its config.yaml (the schema's default when absent)."""
    default = CheckpointConfig.best_metric
    try:
        cfg = yaml.safe_load(RunLayout(run_dir).config.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return default
    section = cfg.get("checkpoint") if isinstance(cfg, dict) else None
    metric = section.get("best_metric", default) if isinstance(section, dict) else default
    return metric if metric in BEST_METRICS else default


def _pick_run_checkpoint(run_dir: Path) -> tuple[Path, str]:
    record = read_record(run_dir)
    store = CheckpointStore.of_run(run_dir, record.owns if record else None)
    metric = _best_metric(run_dir)
    best = store.best(metric)
    if best is not None:
        return best, f"best ({metric})"
    latest = store.latest()
    if latest is not None:
        return latest, "latest"
    raise ModelError(
        f"--model {run_dir}: a run folder with no checkpoint yet (none good in {store.root.name}/); serve it once "
        f"training has saved its first checkpoint, or pass an export folder"
    )


def resolve_model(path: str | Path, base_model: Optional[str] = None) -> ResolvedModel:
    """Say what ``path`` is and where its loadable model lies; a one-line ``ModelError`` otherwise.

    ``base_model`` (a folder or repo id) is used for checkpoints instead of the one their
    checkpoint record names.
    """
    given = Path(path).expanduser()
    if not given.exists():
        raise ModelError(f"--model {given}: not found; pass an export folder, a checkpoint folder or a run folder")
    if not given.is_dir():
        raise ModelError(f"--model {given}: is a file; pass the folder (an export, a checkpoint or a run folder)")
    if is_export(given):
        return ResolvedModel("export", given, given, "export", _run_of_export(given))
    if CheckpointStore.holds_weights(given):
        return ResolvedModel("checkpoint", given, given, "checkpoint", _run_of_checkpoint(given), base_model)
    store = CheckpointStore.of_run(given)
    if store.exists():
        ckpt, how = _pick_run_checkpoint(given)
        log.info("--model %s: serving the %s checkpoint %s", given, how, ckpt.name)
        return ResolvedModel("run", given, ckpt, "checkpoint", given, base_model, how)
    if (given / RUN_FILE).is_file() or (given / CONFIG_FILE).is_file():
        raise ModelError(f"--model {given}: a run folder with no checkpoint yet (nothing in {store.root.name}/); "
                         f"serve it once training has saved its first checkpoint, or pass an export folder")
    raise ModelError(
        f"--model {given}: expected an export folder ({' + '.join(EXPORT_FILES)}), a checkpoint folder ({STATE_FILE}) "
        f"or a run folder ({store.root.name}/); it holds none of them"
    )
