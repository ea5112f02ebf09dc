"""The one owner of a run's checkpoints: which folders are checkpoints, which is best or latest, what is kept.

Layout (with the base model folder its record names, a checkpoint is all a resume or an export needs)::

    <run_dir>/checkpoints/step_000500/
        training_state.pt   xtts_ft.training_state.TrainingState.to_dict() (weights_only-safe)
        meta.json           CheckpointRecord: step, eval results, run id, vocab fingerprint, base model,
                            sha256 of training_state.pt, whether the optimizer state is in it
        vocab.json          the (extended) vocabulary the GPT was trained with
        config.yaml         the resolved run config

Nothing outside the store builds or lists checkpoint folder paths (utils/import_graph.py fails on
``CHECKPOINTS_DIR``, the ``step_`` folder name, ``"checkpoints"`` elsewhere), parses ``meta.json`` or reads
``training_state.pt``. Its parts, one job each (every name is re-exported here; import them from here):

* xtts_ft/checkpoint_record.py: :class:`CheckpointRecord`, the one parser and writer of ``meta.json``, and
  :func:`score_of` / :func:`is_better` / :func:`best_of`, "better by metric" for the trainer's in-memory best
  and for :meth:`CheckpointStore.best` on disk.
* xtts_ft/checkpoint_retention.py: :class:`RetentionPolicy`, what ``checkpoint.keep_last`` / ``keep_best`` /
  ``optimizer_state: latest`` keep (the plan of one pass, and the most checkpoints on disk at once).
* this module, the folders: :func:`is_checkpoint` / :func:`holds_weights` (what a folder is), :meth:`list`,
  :meth:`step_folders`, :meth:`latest`, :meth:`best`, :meth:`move_aside` (a branch, another run's folder),
  :meth:`apply_retention`; :meth:`load_state` verifies the sha256 and then loads with ``weights_only=True``;
  :meth:`save` writes each file into a staging folder beside the final one, fsyncs, and swaps it in
  (:func:`xtts_ft.tempfiles.replace_dir`): a crash or a full disk leaves the earlier checkpoints untouched, and a
  failed save removes its staging folder at once. Staging, swapped-out and half-deleted folders are named by
  :func:`xtts_ft.tempfiles.staging_sibling` (``.step_000500.new-<host>-<pid>``, ``.old-``, ``.trash-``);
  :meth:`clean_staging` removes one only when its writer is dead.
"""

from __future__ import annotations

import builtins
import dataclasses
import hashlib
import logging
import os
import re
import shutil
import time
from pathlib import Path
from typing import IO, Callable, Iterable, Mapping, Optional, Union

import torch

from xtts_ft.checkpoint_record import (
    BEST_METRICS,
    SIMILARITY_WEIGHT,
    CheckpointRecord,
    Owner,
    Scored,
    StoredCheckpoint,
    best_of,
    is_better,
    score_of,
)
from xtts_ft.checkpoint_retention import RetentionOutcome, RetentionPlan, RetentionPolicy
from xtts_ft.errors import CheckpointError
from xtts_ft.json_types import JsonObject
from xtts_ft.layout import (
    CHECKPOINTS_DIR,
    CONFIG_FILE,
    DVAE_FILE,
    STATE_FILE,
    VOCAB_FILE,
    CheckpointLayout,
    RunLayout,
    holds_weights,
    is_checkpoint,
    step_dir_name,
    step_of,
)
from xtts_ft.lora_weights import merged_gpt_state
from xtts_ft.safe_load import load_weights
from xtts_ft.tempfiles import atomic_write, fsync_dir, process_alive, replace_dir, staging_sibling, staging_writer_dead
from xtts_ft.training_state import FORMAT, TrainingState

__all__ = [
    "BEST_METRICS", "SIMILARITY_WEIGHT", "CheckpointRecord", "CheckpointStore", "Owner", "RetentionOutcome",
    "RetentionPlan", "RetentionPolicy", "Scored", "StoredCheckpoint", "best_of", "file_sha256", "holds_weights",
    "is_better", "is_checkpoint", "score_of", "write_state",
]

log = logging.getLogger(__name__)

# --- files -----------------------------------------------------------------------------------------

_verified: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> sha256: each file hashed once


def write_state(state: Mapping[str, object], f: IO[bytes]) -> None:
    """Serialise the training state (module level so tests can simulate a crash mid-write)."""
    torch.save(state, f)


def file_sha256(path: Path) -> str:
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _verified:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 22), b""):
                h.update(chunk)
        _verified[key] = h.hexdigest()
    return _verified[key]


_LEGACY_STAGING = re.compile(r"^\.(tmp|trash)_step_\d+_(?P<pid>\d+)$")  # names written before staging_sibling


class CheckpointStore:
    """The checkpoints in one ``checkpoints`` folder (a path, or a run's :class:`RunLayout`); ``owner``: which
    of them are the current run's (None: all)."""

    def __init__(self, checkpoints: Union[Path, RunLayout], owner: Optional[Owner] = None) -> None:
        self.root = checkpoints.root / CHECKPOINTS_DIR if isinstance(checkpoints, RunLayout) else Path(checkpoints)
        self.owner = owner

    @classmethod
    def of_run(cls, run_dir: Path, owner: Optional[Owner] = None) -> CheckpointStore:
        """The store of ``<run_dir>/checkpoints``."""
        return cls(RunLayout(run_dir), owner)

    # --- what a folder is (nothing verified) -------------------------------------------------------
    is_checkpoint = staticmethod(is_checkpoint)  # a checkpoint this project wrote: it has its record
    holds_weights = staticmethod(holds_weights)  # it has a training state: what export and synthesis load

    @staticmethod
    def run_dir_of(folder: Path) -> Optional[Path]:
        """``<run>/checkpoints/step_N`` -> ``<run>``; None when ``folder`` does not sit in a run's checkpoints."""
        parent = Path(folder).resolve().parent
        return parent.parent if parent.name == CHECKPOINTS_DIR else None

    def exists(self) -> bool:
        """Whether the checkpoints folder is there (a run that has started saving)."""
        return self.root.is_dir()

    def folder_of(self, step: int) -> Path:
        """Where the checkpoint of ``step`` is (or would be) written."""
        return self.root / step_dir_name(step)

    # --- reading ---------------------------------------------------------------------------------
    def list(self) -> list[StoredCheckpoint]:
        """The current run's finished checkpoint folders, oldest first (not verified)."""
        if not self.root.is_dir():
            return []
        found = []
        for p in self.root.iterdir():
            step = step_of(p.name)
            if step is None or not p.is_dir() or not is_checkpoint(p):
                continue
            try:
                record: Optional[CheckpointRecord] = CheckpointRecord.read(p)
            except CheckpointError:
                record = None  # owned only by a run that adopted run-id-less checkpoints
            if self.owner is None or self.owner(record):
                found.append(StoredCheckpoint(step, p, record))
        return sorted(found, key=lambda c: c.step)

    def foreign_at(self, step: int) -> Optional[Path]:
        """The folder of ``step`` when another run wrote it (a save must move it aside, never overwrite it)."""
        folder = self.folder_of(step)
        if not folder.is_dir():
            return None
        try:
            record: Optional[CheckpointRecord] = CheckpointRecord.read(folder)
        except CheckpointError:
            record = None
        return None if self.owner is None or self.owner(record) else folder

    def step_folders(self) -> dict[int, Path]:
        """Every folder named like a checkpoint (``step_NNNNNN``), finished or not, any run's, by step: what a
        listing for the user shows (the report's links, the folders a mistaken ``--checkpoint`` holds)."""
        if not self.root.is_dir():
            return {}
        found = {step: p for p in self.root.iterdir() if (step := step_of(p.name)) is not None and p.is_dir()}
        return dict(sorted(found.items()))

    def disk_bytes(self) -> int:
        """Bytes of every file under the checkpoints folder (staging and other runs' folders included)."""
        if not self.root.is_dir():
            return 0
        return sum(p.stat().st_size for p in self.root.rglob("*") if p.is_file())

    @staticmethod
    def verify(folder: Path) -> CheckpointRecord:
        """The record of ``folder`` after checking training_state.pt against its sha256."""
        record = CheckpointRecord.read(folder)
        state = CheckpointLayout(folder).state
        if not record.state_sha256:
            raise CheckpointError(f"{CheckpointLayout(folder).meta}: lacks training_state_sha256; the checkpoint is "
                                  f"damaged, use an earlier one")
        if not state.is_file():
            raise CheckpointError(f"{state}: missing; the checkpoint is incomplete, use an earlier one")
        try:
            digest = file_sha256(state)
        except OSError as exc:  # e.g. a run dir copied from another user's Studio without read permission
            raise CheckpointError(f"{state}: cannot be read ({exc.strerror or exc}); fix its permissions, or resume "
                                  f"from another checkpoint") from None
        if digest != record.state_sha256:
            raise CheckpointError(f"{state}: checksum mismatch (file truncated or corrupted); delete {folder} or "
                                  f"resume from an earlier checkpoint")
        return record

    @staticmethod
    def load_state(folder: Path) -> TrainingState:
        """The verified training state (sha256, then ``weights_only=True``)."""
        CheckpointStore.verify(folder)
        path = CheckpointLayout(folder).state
        return TrainingState.from_dict(load_weights(path, CheckpointError), str(path))

    @staticmethod
    def load_gpt_weights(folder: Path) -> dict[str, torch.Tensor]:
        """The GPT state dict of ``folder`` in plain weights: this project's training state (verified when its
        record has a sha256; LoRA adapters merged, xtts_ft/lora_weights.py), or a bare ``{"gpt": ...}`` /
        ``{"model": ...}`` file (coqui trainer style)."""
        path = CheckpointLayout(folder).state
        if not path.is_file():
            raise CheckpointError(f"{folder}: no {STATE_FILE}; pass a checkpoint folder such as checkpoints/step_001000")
        record = CheckpointRecord.find(folder)
        if record is not None and record.state_sha256:
            CheckpointStore.verify(folder)  # a truncated or corrupted file is named, never used
        obj = load_weights(path, CheckpointError)
        if isinstance(obj, dict) and "format" in obj:  # a LoRA run's adapters merged into plain weights
            state = TrainingState.from_dict(obj, str(path))
            return merged_gpt_state(state.gpt, state.training_config, str(path))
        for key in ("gpt", "model"):
            if isinstance(obj, dict) and isinstance(obj.get(key), dict):
                weights: dict[str, torch.Tensor] = obj[key]
                return weights
        raise CheckpointError(f"{path}: expected a training state with the GPT weights under 'gpt' (or 'model')")

    def _good(self) -> tuple[builtins.list[StoredCheckpoint], builtins.list[StoredCheckpoint]]:
        """(verified, damaged) among the current run's checkpoints, oldest first."""
        good: builtins.list[StoredCheckpoint] = []
        damaged: builtins.list[StoredCheckpoint] = []
        for c in self.list():
            try:
                good.append(dataclasses.replace(c, record=self.verify(c.folder)))
            except CheckpointError as exc:
                damaged.append(c)
                log.debug("damaged checkpoint: %s", exc)
        return good, damaged

    def latest(self) -> Optional[Path]:
        """The current run's newest checkpoint that verifies; damaged ones are skipped with a warning."""
        for c in reversed(self.list()):
            try:
                self.verify(c.folder)
            except CheckpointError as exc:
                log.warning("skipping damaged checkpoint: %s; falling back to the previous one", exc)
                continue
            return c.folder
        return None

    def best(self, metric: str = "eval_loss") -> Optional[Path]:
        """The current run's good checkpoint that :func:`is_better` than all others under ``metric`` (the
        earliest on a tie); None when none has a score."""
        best = best_of(self._good()[0], metric)
        return best.folder if best is not None else None

    # --- writing ---------------------------------------------------------------------------------
    def save(self, state: TrainingState, *, vocab_path: Path, write_config: Callable[[Path], None],
             run_id: Optional[str] = None, base_model: Optional[str] = None, eval_loss: Optional[float] = None,
             eval_metrics: Optional[JsonObject] = None, dvae_pth: Optional[Path] = None) -> Path:
        """Write ``step_<state.step>/`` through a staging folder and return it; the rest of the record
        (epoch, vocab, precision, whether the optimizer state is in it) comes from ``state``. ``dvae_pth``: the
        run's fine-tuned DVAE (the DVAE stage), copied in: the checkpoint's codes, evaluation and export need it."""
        record = CheckpointRecord(
            step=int(state.step), state_sha256=None, epoch=int(state.epoch), run_id=run_id,
            vocab_fingerprint=state.vocab_fingerprint, base_model=base_model, base_vocab_size=state.base_vocab_size,
            precision=state.precision, eval_loss=eval_loss, eval_metrics=eval_metrics, eval_pending=state.eval_pending,
            optimizer_state=state.optimizer is not None)
        return self._write(state, record, Path(vocab_path).read_bytes(), write_config, dvae_pth)

    def _write(self, state: TrainingState, record: CheckpointRecord, vocab: bytes,
               write_config: Callable[[Path], object], dvae_pth: Optional[Path] = None) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        final = self.folder_of(state.step)
        stage = staging_sibling(final, "new")
        shutil.rmtree(stage, ignore_errors=True)
        stage.mkdir()
        try:
            atomic_write(stage / STATE_FILE, lambda f: write_state(state.to_dict(), f), durable=True)
            atomic_write(stage / VOCAB_FILE, vocab, durable=True)
            if dvae_pth is not None:
                with open(dvae_pth, "rb") as src:
                    atomic_write(stage / DVAE_FILE, lambda f: shutil.copyfileobj(src, f), durable=True)
            tmp_cfg = stage / f".{CONFIG_FILE}.tmp"
            write_config(tmp_cfg)
            atomic_write(stage / CONFIG_FILE, tmp_cfg.read_bytes(), durable=True)
            tmp_cfg.unlink()
            dataclasses.replace(record, format=FORMAT, step=int(state.step),
                                state_sha256=file_sha256(stage / STATE_FILE),
                                created=time.strftime("%Y-%m-%dT%H:%M:%S%z")).write(stage)
            fsync_dir(stage)
        except BaseException:  # e.g. disk full: drop the partial folder now (frees its space), then report
            shutil.rmtree(stage, ignore_errors=True)
            raise
        replace_dir(stage, final, durable=True)  # the same step saved again (e.g. after a rollback): swapped
        return final

    def _slim(self, c: StoredCheckpoint) -> None:
        """Rewrite ``c`` without its optimizer state (staged and swapped in; the sha256 is recomputed)."""
        files = CheckpointLayout(c.folder)
        state = self.load_state(c.folder).without_optimizer()
        config, vocab = files.config.read_bytes(), files.vocab.read_bytes()  # read before the old folder is swapped
        record = dataclasses.replace(c.record or self.verify(c.folder), optimizer_state=False)
        dvae = files.dvae if files.dvae.is_file() else None  # copied before the old folder is swapped out
        self._write(state, record, vocab, lambda p: p.write_bytes(config), dvae)

    def apply_retention(self, policy: RetentionPolicy, latest: Optional[Path] = None) -> RetentionOutcome:
        """One pass of :meth:`RetentionPolicy.plan` over the good checkpoints: remove what it drops, then rewrite
        without the optimizer state what it slims (every kept one but ``latest``, default: the newest)."""
        good, damaged = self._good()
        outcome = RetentionOutcome(damaged=[c.folder for c in damaged])
        plan = policy.plan(good, latest)
        for c in plan.remove:
            if _remove_folder(c.folder):
                outcome.removed.append(c.folder)
        for c in plan.slim:
            try:
                self._slim(c)
            except (CheckpointError, OSError) as exc:  # housekeeping: the full checkpoint stays as it was
                log.warning("could not drop the optimizer state of %s (%s); it keeps it", c.folder, exc)
                continue
            outcome.slimmed.append(c.folder)
        for path in outcome.damaged:
            log.warning("damaged checkpoint %s is left in place (not counted as one of the last %d); delete it by "
                        "hand", path, policy.keep_last)
        return outcome

    def move_aside(self, folders: Iterable[Path], into: Path) -> builtins.list[Path]:
        """Move checkpoint folders out of this store into the folder ``into`` (created), keeping their names:
        the later steps a resume from an older one sets aside (a branch), another run's folder a save would
        otherwise overwrite. Returns where each went."""
        into = Path(into)
        into.mkdir(parents=True, exist_ok=True)
        moved: builtins.list[Path] = []
        for folder in folders:
            target = into / Path(folder).name
            os.replace(folder, target)
            moved.append(target)
        return moved

    def clean_staging(self) -> builtins.list[Path]:
        """Remove staging, swapped-out and half-deleted folders whose writer is dead; returns those removed.
        A live writer's (another rank, another run on this folder) and another host's are left alone."""
        removed: builtins.list[Path] = []
        if not self.root.is_dir():
            return removed
        for p in self.root.iterdir():
            legacy = _LEGACY_STAGING.match(p.name)
            dead = (staging_writer_dead(p) if legacy is None
                    else int(legacy["pid"]) != os.getpid() and not process_alive(int(legacy["pid"])))
            if dead:
                shutil.rmtree(p, ignore_errors=True)
                removed.append(p)
        return removed


def _remove_folder(path: Path) -> bool:
    """Rename out of sight, then delete: a kill mid-delete leaves a ``.trash-`` staging name (cleaned at the
    next start), never a half-deleted ``step_`` folder that looks like a checkpoint."""
    trash = staging_sibling(path, "trash")
    shutil.rmtree(trash, ignore_errors=True)
    try:
        os.replace(path, trash)
    except OSError as exc:  # retention is housekeeping: never fail a save over it
        log.warning("could not remove the old checkpoint %s (%s); delete it by hand", path, exc.strerror or exc)
        return False
    shutil.rmtree(trash, ignore_errors=True)
    return True
