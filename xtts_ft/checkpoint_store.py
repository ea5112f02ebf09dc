"""The one owner of a run's checkpoints: their record, their files, which is best or latest, what is kept.

Layout (with the base model folder its record names, a checkpoint is all a resume or an export needs)::

    <run_dir>/checkpoints/step_000500/
        training_state.pt   xtts_ft.training_state.TrainingState.to_dict() (weights_only-safe)
        meta.json           CheckpointRecord: step, eval results, run id, vocab fingerprint, base model,
                            sha256 of training_state.pt, whether the optimizer state is in it
        vocab.json          the (extended) vocabulary the GPT was trained with
        config.yaml         the resolved run config

Nothing outside this module parses ``meta.json`` or reads ``training_state.pt``:

* :class:`CheckpointRecord` is the one parser and writer of ``meta.json`` (every file this project
  wrote reads, tests/assets/checkpoint_format1 included); a damaged one is a one-line
  :class:`CheckpointError` naming the folder.
* :meth:`CheckpointStore.load_state` verifies the sha256 and then loads with ``weights_only=True``;
  :meth:`CheckpointStore.load_gpt_weights` also takes a coqui-trainer-style folder (export, synthesis).
* :meth:`CheckpointStore.save` writes each file into a staging folder beside the final one, fsyncs,
  and swaps it in (:func:`xtts_ft.tempfiles.replace_dir`): a crash or a full disk leaves the earlier
  checkpoints untouched, and a failed save removes its staging folder at once.
* :meth:`CheckpointStore.apply_retention` is one pass over the run's good checkpoints: the newest
  ``keep_last`` and (``keep_best``) the best stay, the rest go, and with ``optimizer_state: latest``
  every kept one but the newest is rewritten without AdamW's moments (twice the GPT's size; only a
  resume needs them). Damaged checkpoints are never counted nor deleted, another run's never touched.
* :func:`score_of` / :func:`is_better` decide "better by metric" both for the trainer's in-memory best
  and for :meth:`CheckpointStore.best` on disk.
* Staging, swapped-out and half-deleted folders are named by :func:`xtts_ft.tempfiles.staging_sibling`
  (``.step_000500.new-<host>-<pid>``, ``.old-``, ``.trash-``); :meth:`CheckpointStore.clean_staging`
  removes one only when its writer is dead.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Union

import torch

from xtts_ft.errors import CheckpointError
from xtts_ft.layout import (
    CONFIG_FILE,
    DVAE_FILE,
    META_FILE,
    STATE_FILE,
    VOCAB_FILE,
    CheckpointLayout,
    RunLayout,
    step_dir_name,
    step_of,
)
from xtts_ft.lora_weights import merged_gpt_state
from xtts_ft.safe_load import load_weights
from xtts_ft.tempfiles import atomic_write, fsync_dir, process_alive, replace_dir, staging_sibling, staging_writer_dead
from xtts_ft.training_state import FORMAT, TrainingState

log = logging.getLogger(__name__)

# --- "better by metric" (checkpoint.best_metric) --------------------------------------------------

BEST_METRICS = ("eval_loss", "cer", "cer_similarity")
SIMILARITY_WEIGHT = 0.5  # cer_similarity: 5 points of CER make up for 0.1 of speaker similarity


def score_of(metric: str, evals: Optional[Mapping[str, Any]]) -> Optional[float]:
    """One evaluation's score under ``metric`` (lower is better); None when it lacks the metric or is not finite.

    ``eval_loss``: the teacher-forced eval loss; ``cer``: ``sample_cer``, the samples' character error rate
    as the recogniser hears them; ``cer_similarity``: ``sample_cer + 0.5 * (1 - sample_speaker_similarity)``.
    """
    if metric not in BEST_METRICS:
        raise ValueError(f"unknown best metric {metric!r}; expected one of {BEST_METRICS}")
    if not evals:
        return None
    if metric == "eval_loss":
        value = evals.get("eval_loss")
    elif metric == "cer":
        value = evals.get("sample_cer")
    else:
        cer, sim = evals.get("sample_cer"), evals.get("sample_speaker_similarity")
        value = None if cer is None or sim is None else float(cer) + SIMILARITY_WEIGHT * (1.0 - float(sim))
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


Scored = Union[None, float, Mapping[str, Any]]  # a score already computed, or an evaluation to score


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
    eval_metrics: Optional[dict[str, Any]] = None
    eval_pending: bool = False  # its evaluation was cut short by a stop; the resume redoes it
    optimizer_state: bool = True  # False: weights-only (slimmed by retention); resuming it restarts AdamW
    created: str = ""
    extra: dict[str, Any] = field(default_factory=dict)  # keys this version does not know, written back as read

    # the JSON names of fields whose attribute name differs
    _JSON_NAMES = {"state_sha256": "training_state_sha256"}

    @property
    def evaluations(self) -> dict[str, Any]:
        """The eval results to score (eval_loss included), for :func:`score_of`."""
        return dict(self.eval_metrics or {}, eval_loss=self.eval_loss)

    def score(self, metric: str) -> Optional[float]:
        return score_of(metric, self.evaluations)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.extra)
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
        return cls.read(folder) if CheckpointLayout(folder).meta.is_file() else None

    def write(self, folder: Path) -> None:
        atomic_write(CheckpointLayout(folder).meta, json.dumps(self.to_json(), indent=2, default=str), durable=True)


@dataclass(frozen=True)
class StoredCheckpoint:
    step: int
    folder: Path
    record: Optional[CheckpointRecord]  # None: its meta.json is damaged


Owner = Callable[[Optional[CheckpointRecord]], bool]  # whether a checkpoint belongs to the current run


# --- files -----------------------------------------------------------------------------------------

_verified: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> sha256: each file hashed once


def write_state(state: dict, f) -> None:
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


@dataclass(frozen=True)
class RetentionPolicy:
    keep_last: int
    keep_best: bool = True
    metric: str = "eval_loss"
    slim: bool = False  # checkpoint.optimizer_state: latest

    @classmethod
    def from_config(cls, section) -> RetentionPolicy:
        """From the ``checkpoint`` config section."""
        return cls(keep_last=section.keep_last, keep_best=section.keep_best, metric=section.best_metric,
                   slim=section.optimizer_state == "latest")


@dataclass
class RetentionOutcome:
    removed: list[Path] = field(default_factory=list)
    slimmed: list[Path] = field(default_factory=list)
    damaged: list[Path] = field(default_factory=list)  # left in place for the user to inspect


_LEGACY_STAGING = re.compile(r"^\.(tmp|trash)_step_\d+_(?P<pid>\d+)$")  # names written before staging_sibling


class CheckpointStore:
    """The checkpoints in one ``checkpoints`` folder (a path, or a run's :class:`RunLayout`); ``owner``: which
    of them are the current run's (None: all)."""

    def __init__(self, checkpoints: Union[Path, RunLayout], owner: Optional[Owner] = None) -> None:
        self.root = checkpoints.checkpoints if isinstance(checkpoints, RunLayout) else Path(checkpoints)
        self.owner = owner

    @classmethod
    def of_run(cls, run_dir: Path, owner: Optional[Owner] = None) -> CheckpointStore:
        """The store of ``<run_dir>/checkpoints``."""
        return cls(RunLayout(run_dir), owner)

    # --- reading ---------------------------------------------------------------------------------
    def list(self) -> list[StoredCheckpoint]:
        """The current run's finished checkpoint folders, oldest first (not verified)."""
        if not self.root.is_dir():
            return []
        found = []
        for p in self.root.iterdir():
            step = step_of(p.name)
            if step is None or not p.is_dir() or not CheckpointLayout(p).meta.is_file():
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
        folder = self.root / step_dir_name(step)
        if not folder.is_dir():
            return None
        try:
            record: Optional[CheckpointRecord] = CheckpointRecord.read(folder)
        except CheckpointError:
            record = None
        return None if self.owner is None or self.owner(record) else folder

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
    def is_checkpoint(folder: Path) -> bool:
        """Whether ``folder`` looks like a checkpoint (it has a record); nothing verified."""
        return CheckpointLayout(folder).meta.is_file()

    @staticmethod
    def load_state(folder: Path) -> TrainingState:
        """The verified training state (sha256, then ``weights_only=True``)."""
        CheckpointStore.verify(folder)
        path = CheckpointLayout(folder).state
        return TrainingState.from_dict(load_weights(path, CheckpointError), str(path))

    @staticmethod
    def load_gpt_weights(folder: Path) -> dict[str, Any]:
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
            record = TrainingState.from_dict(obj, str(path))
            return merged_gpt_state(record.gpt, record.training_config, str(path))
        for key in ("gpt", "model"):
            if isinstance(obj, dict) and isinstance(obj.get(key), dict):
                return obj[key]
        raise CheckpointError(f"{path}: expected a training state with the GPT weights under 'gpt' (or 'model')")

    def _good(self) -> tuple[list[StoredCheckpoint], list[StoredCheckpoint]]:
        """(verified, damaged) among the current run's checkpoints, oldest first."""
        good, damaged = [], []
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
        return _best_of(self._good()[0], metric)

    # --- writing ---------------------------------------------------------------------------------
    def save(self, state: TrainingState, *, vocab_path: Path, write_config: Callable[[Path], None],
             run_id: Optional[str] = None, base_model: Optional[str] = None, eval_loss: Optional[float] = None,
             eval_metrics: Optional[dict] = None, dvae_pth: Optional[Path] = None) -> Path:
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
               write_config: Callable[[Path], None], dvae_pth: Optional[Path] = None) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        final = self.root / step_dir_name(state.step)
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
        """One pass: keep the newest ``keep_last`` good checkpoints and (``keep_best``) the best one, remove the
        others, and (``slim``) drop the optimizer state of every kept one but ``latest`` (default: the newest)."""
        good, damaged = self._good()
        outcome = RetentionOutcome(damaged=[c.folder for c in damaged])
        keep = {c.folder for c in good[-policy.keep_last:]}
        best = _best_of(good, policy.metric) if policy.keep_best else None
        if best is not None:
            keep.add(best)
        newest = Path(latest).resolve() if latest is not None else (good[-1].folder.resolve() if good else None)
        for c in good:
            if c.folder not in keep:
                if _remove_folder(c.folder):
                    outcome.removed.append(c.folder)
            elif policy.slim and c.folder.resolve() != newest and c.record is not None and c.record.optimizer_state:
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

    def clean_staging(self) -> list[Path]:
        """Remove staging, swapped-out and half-deleted folders whose writer is dead; returns those removed.
        A live writer's (another rank, another run on this folder) and another host's are left alone."""
        removed: list[Path] = []
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


def _best_of(good: list[StoredCheckpoint], metric: str) -> Optional[Path]:
    best: Optional[StoredCheckpoint] = None
    for c in good:
        if c.record is not None and is_better(metric, c.record.evaluations,
                                              best.record.evaluations if best and best.record else None):
            best = c
    return best.folder if best is not None else None


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
