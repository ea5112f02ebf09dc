"""Checkpoints: one self-contained folder per save, written atomically, verified before use.

Layout (together with the base model folder named in ``meta.json``, it is all a resume or an export
needs)::

    <run_dir>/checkpoints/step_000500/
        training_state.pt   GPT weights, optimizer, loss scaler, step, epoch, sampler position, RNG
                            states, stability counters, LR factor (loads with weights_only=True:
                            tensors, numbers, strings, lists and dicts only - no numpy objects)
        meta.json           step, eval loss, vocab fingerprint, base model, sha256 of training_state.pt
        vocab.json          the (extended) vocabulary the GPT was trained with
        config.yaml         the resolved run config

Writing: every file goes to a staging folder ``.tmp_step_000500_<pid>`` in the same directory
(temp file, flush, fsync, ``os.replace``), the folder is fsynced and renamed into place, and the
parent directory is fsynced. A crash or a full disk at any point leaves the previous checkpoints
untouched; a failed write removes its staging folder at once, and one left by a kill is ignored
and cleaned up when the next run starts.

Reading: ``meta.json`` must parse and the sha256 of ``training_state.pt`` must match; a damaged
checkpoint is a :class:`CheckpointError` naming the folder, and ``find_latest_checkpoint`` skips it
(with a warning) in favour of the previous good one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import shutil
import time
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import torch

from xtts_ft.errors import CheckpointError
from xtts_ft.layout import CONFIG_FILE, DVAE_FILE, META_FILE, STATE_FILE, VOCAB_FILE, RunLayout, step_dir_name, step_of
from xtts_ft.safe_load import load_weights
from xtts_ft.tempfiles import atomic_write, fsync_dir, replace_dir
from xtts_ft.train.state_record import FORMAT, TrainingState

log = logging.getLogger(__name__)

_verified: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> sha256, to hash each file once


def checkpoint_root(run_dir: Path) -> Path:
    return RunLayout(run_dir).checkpoints


# --- atomic writing: xtts_ft.tempfiles.atomic_write (durable=True for every checkpoint file) ------


def write_state(state: dict, f) -> None:
    """Serialise the training state (a module-level function so tests can simulate a crash mid-write)."""
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


def save_checkpoint(
    run_dir: Path, state: TrainingState, meta: dict, *, vocab_path: Path, write_config: Callable[[Path], None],
    dvae_pth: Optional[Path] = None,
) -> Path:
    """Write ``checkpoints/step_<step>/`` atomically and return its path.

    ``dvae_pth``: the run's fine-tuned DVAE (the DVAE stage), copied in as ``dvae.pth``: the checkpoint's
    codes, evaluation and export need it, and the stage's own file may change on a later run."""
    root = checkpoint_root(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    step = state.step
    final = root / step_dir_name(step)
    stage = root / f".tmp_{final.name}_{os.getpid()}"
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir()
    try:
        atomic_write(stage / STATE_FILE, lambda f: write_state(state.to_dict(), f), durable=True)
        atomic_write(stage / VOCAB_FILE, Path(vocab_path).read_bytes(), durable=True)
        if dvae_pth is not None:
            with open(dvae_pth, "rb") as src:
                atomic_write(stage / DVAE_FILE, lambda f: shutil.copyfileobj(src, f), durable=True)
        tmp_cfg = stage / ".config.yaml.tmp"
        write_config(tmp_cfg)
        atomic_write(stage / CONFIG_FILE, tmp_cfg.read_bytes(), durable=True)
        tmp_cfg.unlink()
        meta = {**meta, "format": FORMAT, "step": int(step), "training_state_sha256": file_sha256(stage / STATE_FILE),
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        atomic_write(stage / META_FILE, json.dumps(meta, indent=2), durable=True)
        fsync_dir(stage)
    except BaseException:  # e.g. disk full: drop the partial folder now (frees its space), then report
        shutil.rmtree(stage, ignore_errors=True)
        raise
    replace_dir(stage, final, durable=True)  # the same step saved again (e.g. after a rollback): swapped
    return final


def clean_staging(run_dir: Path) -> None:
    """Remove staging folders left by an interrupted save."""
    root = checkpoint_root(run_dir)
    if root.is_dir():
        for p in root.iterdir():
            if p.name.startswith((".tmp_", ".trash_")) or ".old-" in p.name:  # see tempfiles.replace_dir
                shutil.rmtree(p, ignore_errors=True)


# --- reading ---------------------------------------------------------------------------------


def read_meta(ckpt_dir: Path) -> dict:
    path = Path(ckpt_dir) / META_FILE
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(
            f"{ckpt_dir}: no {META_FILE}; not a checkpoint folder (or its save was interrupted)"
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError, OSError) as exc:
        raise CheckpointError(f"{path}: unreadable ({exc}); the checkpoint is damaged, use an earlier one") from None
    if not isinstance(meta, dict) or "training_state_sha256" not in meta:
        raise CheckpointError(f"{path}: lacks training_state_sha256; the checkpoint is damaged, use an earlier one")
    return meta


def verify_checkpoint(ckpt_dir: Path) -> dict:
    """Return meta.json after checking training_state.pt against its recorded sha256."""
    meta = read_meta(ckpt_dir)
    state = Path(ckpt_dir) / STATE_FILE
    if not state.is_file():
        raise CheckpointError(f"{state}: missing; the checkpoint is incomplete, use an earlier one")
    try:
        digest = file_sha256(state)
    except OSError as exc:  # e.g. a run dir copied from another user's Studio without read permission
        raise CheckpointError(
            f"{state}: cannot be read ({exc.strerror or exc}); fix its permissions, or resume from another checkpoint"
        ) from None
    if digest != meta["training_state_sha256"]:
        raise CheckpointError(
            f"{state}: checksum mismatch (file truncated or corrupted); delete {ckpt_dir} or resume from an "
            f"earlier checkpoint"
        )
    return meta


def load_training_state(ckpt_dir: Path) -> TrainingState:
    """The verified training state (checksum, then ``weights_only=True``); its meta.json: :func:`verify_checkpoint`."""
    ckpt_dir = Path(ckpt_dir)
    verify_checkpoint(ckpt_dir)
    path = ckpt_dir / STATE_FILE
    return TrainingState.from_dict(load_weights(path, CheckpointError), str(path))


def list_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """(step, folder) of every finished checkpoint folder, oldest first (not verified)."""
    root = checkpoint_root(run_dir)
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        step = step_of(p.name)
        if step is not None and p.is_dir() and (p / META_FILE).is_file():
            found.append((step, p))
    return sorted(found)


Owner = Callable[[dict], bool]  # meta.json -> whether the checkpoint belongs to the current run (run_folder.py)


def owned_checkpoints(run_dir: Path, owner: Optional[Owner]) -> list[tuple[int, Path]]:
    """``list_checkpoints`` limited to the current run's (all of them when ``owner`` is None)."""
    found = list_checkpoints(run_dir)
    if owner is None:
        return found
    out = []
    for step, path in found:
        try:
            meta = read_meta(path)
        except CheckpointError:
            meta = {}  # a damaged meta.json: kept only by a run that adopted run-id-less checkpoints
        if owner(meta):
            out.append((step, path))
    return out


def _is_good(path: Path) -> bool:
    try:
        verify_checkpoint(path)
    except CheckpointError:
        return False
    return True


def find_latest_checkpoint(run_dir: Path, owner: Optional[Owner] = None) -> Optional[Path]:
    """The current run's newest checkpoint that verifies; damaged ones are skipped with a warning."""
    for _, path in reversed(owned_checkpoints(run_dir, owner)):
        try:
            verify_checkpoint(path)
        except CheckpointError as exc:
            log.warning("skipping damaged checkpoint: %s; falling back to the previous one", exc)
            continue
        return path
    return None


def best_checkpoint(run_dir: Path, owner: Optional[Owner] = None, metric: str = "eval_loss") -> Optional[Path]:
    """The current run's good checkpoint with the lowest score under ``metric`` (xtts_ft.evaluate.best_metric);
    None if none has one."""
    from xtts_ft.evaluate.best_metric import best_score

    scored = []
    for step, path in owned_checkpoints(run_dir, owner):
        try:
            meta = read_meta(path)
        except CheckpointError:
            continue
        score = best_score(metric, dict(meta.get("eval_metrics") or {}, eval_loss=meta.get("eval_loss")))
        if score is not None and np.isfinite(score) and _is_good(path):
            scored.append((score, step, path))
    return min(scored)[2] if scored else None


def prune_checkpoints(run_dir: Path, keep_last: int, keep_best: bool, owner: Optional[Owner] = None,
                      metric: str = "eval_loss") -> None:
    """Delete all but the current run's newest ``keep_last`` good checkpoints and (with ``keep_best``) the best
    one by ``metric``.

    Only checkpoints that verify count: a damaged one never takes a good one's place. Damaged ones are
    left where they are (with a warning) for the user to inspect; another run's checkpoints are never touched.
    """
    ours = owned_checkpoints(run_dir, owner)
    good = [(step, path) for step, path in ours if _is_good(path)]
    keep = {p for _, p in good[-keep_last:]}
    best = best_checkpoint(run_dir, owner, metric) if keep_best else None
    if best is not None:
        keep.add(best)
    for _, path in good:
        if path not in keep:
            _remove_folder(path)
    good_paths = {p for _, p in good}
    for _, path in ours:
        if path not in good_paths:
            log.warning("damaged checkpoint %s is left in place (not counted as one of the last %d); delete it by hand",
                        path, keep_last)


def _remove_folder(path: Path) -> None:
    """Rename out of sight, then delete: a kill mid-delete leaves a ``.trash_`` folder (cleaned at the next start),
    never a half-deleted ``step_`` folder that looks like a checkpoint or lingers unnoticed."""
    trash = path.with_name(f".trash_{path.name}_{os.getpid()}")
    shutil.rmtree(trash, ignore_errors=True)
    try:
        os.replace(path, trash)
    except OSError as exc:  # retention is housekeeping: never fail a save over it
        log.warning("could not remove the old checkpoint %s (%s); delete it by hand", path, exc.strerror or exc)
        return
    shutil.rmtree(trash, ignore_errors=True)


# --- RNG states as plain lists (weights_only-safe) ---------------------------------------------


def capture_rng(device: torch.device) -> dict:
    version, mt, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    out = {
        "python": [version, list(mt), gauss],
        "numpy": [str(name), [int(k) for k in keys], int(pos), int(has_gauss), float(cached)],
        "torch": torch.get_rng_state(),
    }
    if device.type == "cuda":
        out["cuda"] = torch.cuda.get_rng_state(device)
    return out


def restore_rng(state: dict, device: torch.device) -> None:
    version, mt, gauss = state["python"]
    random.setstate((version, tuple(mt), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)
