"""A run folder belongs to one run: ``<run_dir>/run.json`` says which, and nothing mixes two.

``run.json`` holds a run id and the fingerprint of what defines the run: the dataset's clips (the
bytes of every transcript file the dataset reader takes a clip from, the size of every audio file a
clip names - not reports, notes or other stray files beside them), the text and tokenizer settings
(with the extra text's content and the normaliser version) and the base model. Every checkpoint records the
run id in its record (``CheckpointRecord``); resuming, retention and "latest"/"best" only ever look at the current
run's checkpoints.

``claim_run_folder`` runs before any heavy work (data preparation, tokenizer, DVAE codes). A command
that would start another run in a folder holding checkpoints - another dataset, other text or
tokenizer settings, another base model, ``checkpoint.resume: never``, or ``--resume`` with a
checkpoint of another run - is refused in one line naming what differs, unless the user asks for
``--archive-old-run``: then the old run's checkpoints, samples and logs are moved (never deleted)
into ``<run_dir>/old_runs/<date>_<run id>/`` and the new run starts in the folder. When only the
data changed, ``--continue-with-new-data`` continues the same run on it instead (its checkpoints and
vocabulary kept; the change is an event in events.jsonl).

A folder whose checkpoints predate ``run.json`` is adopted by the first command that resumes it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from xtts_ft.checkpoint_store import CheckpointRecord, CheckpointStore, StoredCheckpoint
from xtts_ft.config import Config, DatasetConfig
from xtts_ft.data.readers import read_entries
from xtts_ft.errors import CheckpointError, RunFolderError
from xtts_ft.input_hash import digest, file_digest
from xtts_ft.json_types import JsonMapping, JsonObject
from xtts_ft.layout import DATA_DIR, OLD_RUNS, RUN_FILE, RUN_OUTPUTS, TOKENIZER_DIR
from xtts_ft.run_history import Event, append_event
from xtts_ft.tempfiles import atomic_write
from xtts_ft.text import NORMALIZER_VERSION
from xtts_ft.tokenizer.command import text_files_in

log = logging.getLogger(__name__)

# What belongs to one run (moved aside together: RUN_OUTPUTS); data/ and tokenizer/ too when the inputs changed.
DERIVED_INPUTS = (DATA_DIR, TOKENIZER_DIR)
#: What defines a run (:func:`run_fingerprint`): a JSON object, as run.json holds it.
Fingerprint = JsonObject


@dataclass
class RunRecord:
    run_id: str
    created: str
    fingerprint: Optional[Fingerprint]  # None: the trainer was called directly, without the pipeline's fingerprint
    adopted: bool = False  # the folder's checkpoints predate run.json: those without a run id belong to this run

    def owns(self, checkpoint: Optional[CheckpointRecord]) -> bool:
        """Whether the checkpoint with this record belongs to this run (None: a damaged record, no run id)."""
        rid = checkpoint.run_id if checkpoint is not None else None
        return rid == self.run_id or (rid is None and self.adopted)


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


def read_record(run_dir: Path) -> Optional[RunRecord]:
    path = Path(run_dir) / RUN_FILE
    if not path.is_file():
        return None
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return RunRecord(run_id=str(raw["run_id"]), created=str(raw.get("created", "")),
                         fingerprint=raw.get("fingerprint"), adopted=bool(raw.get("adopted", False)))
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError):
        raise RunFolderError(f"{path}: damaged (not the JSON this tool writes); restore it, or move the run folder "
                             f"aside and start a new run.output_dir") from None


def write_record(run_dir: Path, record: RunRecord) -> None:
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(run_dir / RUN_FILE, json.dumps(dataclasses.asdict(record), indent=1, ensure_ascii=False),
                 durable=True)


# --- fingerprint -------------------------------------------------------------------------------


def dataset_fingerprint(root: Path, fmt: str = "auto", speaker: str = "",
                        metadata_files: Sequence[str] = ()) -> JsonObject:
    """What defines a dataset folder's clips, as the dataset reader sees them (``data/readers.py``): every transcript
    file a clip's text comes from, by content, and every audio file a clip names, by size (reading hours of audio
    would be heavy work). Reports (an ingest's ingest_report.json, whose timing changes on every run), notes and
    files no clip names do not define the run. ``defining_only`` marks this kind of fingerprint: records written
    before it listed every file of the folder (see :func:`describe_differences`)."""
    root = Path(root).resolve()
    _layout, entries = read_entries(root, fmt, speaker, list(metadata_files))
    transcripts: dict[str, str] = {}  # transcript file -> its digest
    audio: dict[str, int] = {}  # audio file -> its size
    for e in entries:
        if e.audio is None:  # rejected by the reader (reported by prepare): not part of the data
            continue
        source = e.where.rsplit(":", 1)[0] if ":" in e.where else Path(e.where).with_suffix(".txt").as_posix()
        try:
            if source not in transcripts:
                transcripts[source] = file_digest(root / source)
            audio[e.audio.relative_to(root).as_posix()] = e.audio.stat().st_size
        except (OSError, ValueError):  # unreadable or moved files are the data stage's business (it reports them)
            continue
    return {"transcripts": transcripts, "audio": audio, "defining_only": True}


def source_fingerprint(ds: DatasetConfig) -> JsonObject:
    """dataset_fingerprint of a dataset entry's folder; a single parquet/arrow file by size; a Hub id by name."""
    path = Path(ds.path)
    if path.is_file():
        return {"transcripts": {}, "audio": {path.name: path.stat().st_size}}
    if ds.format == "hf" and not path.exists():
        return {"transcripts": {}, "audio": {}, "hub": f"{ds.path}/{ds.hf_name or ''}:{ds.hf_split}@{ds.hf_revision}"}
    return dataset_fingerprint(path, ds.format, ds.speaker_name, ds.metadata_files)


def run_fingerprint(cfg: Config) -> Fingerprint:
    """What defines a run (see the module doc); everything else may change between resumes."""
    extra = sorted(file_digest(p) for p in text_files_in([Path(f) for f in cfg.tokenizer.extra_text_files]))
    tokenizer = {k: v for k, v in dataclasses.asdict(cfg.tokenizer).items() if k != "char_limit"}
    tokenizer["extra_text_files"] = digest("".join(extra).encode(), 16)
    more: JsonObject = {}
    if cfg.more_datasets:  # only with a dataset list: a one-dataset run keeps the fingerprint it always had
        more["more_datasets"] = [{**source_fingerprint(d), "language": cfg.dataset_language(d)}
                                 for d in cfg.more_datasets]
        more["dataset_language"] = cfg.dataset_language(cfg.dataset)
    return {
        **more,
        "dataset": source_fingerprint(cfg.dataset),
        "text": {**dataclasses.asdict(cfg.text), "language": cfg.run.language, "normalizer": NORMALIZER_VERSION},
        "tokenizer": tokenizer,
        "base_model": {"source": cfg.base_model.source, "revision": cfg.base_model.revision},
    }


def _files_changed(what: str, old: JsonMapping, new: JsonMapping, *, legacy: bool = False) -> Optional[str]:
    """``legacy``: ``old`` lists every file of the folder (a record from before ``defining_only``), so a file it has
    and ``new`` lacks may be a report or a note, not a removed clip: only added and edited files count."""
    added = sorted(set(new) - set(old))
    removed = [] if legacy else sorted(set(old) - set(new))
    edited = sorted(k for k in set(old) & set(new) if old[k] != new[k])
    if not (added or removed or edited):
        return None
    parts = [f"{len(v)} {label} ({', '.join(v[:2])}{', ...' if len(v) > 2 else ''})"
             for label, v in (("edited", edited), ("added", added), ("removed", removed)) if v]
    return f"{what} changed: " + ", ".join(parts)


def _dataset_changes(od: JsonMapping, nd: JsonMapping) -> list[str]:
    """What differs between two fingerprints of one dataset entry (files named)."""
    out: list[str] = []
    legacy = not od.get("defining_only") and bool(nd.get("defining_only"))
    for what, key in (("the dataset's transcripts", "transcripts"), ("the dataset's audio files", "audio")):
        change = _files_changed(what, od.get(key) or {}, nd.get(key) or {}, legacy=legacy)
        if change:
            out.append(change)
    if od.get("hub") != nd.get("hub"):
        out.append(f"the Hub dataset changed: {od.get('hub')} -> {nd.get('hub')}")
    return out


DATA_SECTIONS = ("dataset", "more_datasets", "dataset_language")  # what --continue-with-new-data accepts changing


def data_only_differences(old: JsonMapping, new: JsonMapping) -> bool:
    """Whether two fingerprints differ in their data alone (settings, vocabulary inputs and base model equal)."""
    settings = [{k: v for k, v in f.items() if k not in DATA_SECTIONS} for f in (old, new)]
    return bool(describe_differences(old, new)) and not describe_differences(*settings)


def describe_differences(old: JsonMapping, new: JsonMapping) -> list[str]:
    """One phrase per thing that differs between two fingerprints (transcripts first: the usual reason)."""
    out = _dataset_changes(old.get("dataset") or {}, new.get("dataset") or {})
    om, nm = old.get("more_datasets") or [], new.get("more_datasets") or []
    if len(om) != len(nm) or old.get("dataset_language") != new.get("dataset_language") or any(
            _dataset_changes(o, n) or o.get("language") != n.get("language") for o, n in zip(om, nm)):
        counts = [len(f.get("more_datasets") or []) + 1 for f in (old, new)]
        out.append(f"the datasets after the first (dataset[1:]) changed: their files, languages or number "
                   f"({counts[0]} -> {counts[1]} datasets)")
    for section in ("text", "tokenizer", "base_model"):
        o, n = old.get(section) or {}, new.get(section) or {}
        for key in sorted(set(o) | set(n)):
            if o.get(key) == n.get(key):
                continue
            if key == "extra_text_files":
                out.append("the content of tokenizer.extra_text_files changed")
            elif key == "normalizer":
                out.append(f"the text normaliser changed (version {o.get(key)} -> {n.get(key)})")
            else:
                name = f"run.{key}" if key == "language" else f"{section}.{key}"
                out.append(f"{name}: {json.dumps(o.get(key), ensure_ascii=False)} -> "
                           f"{json.dumps(n.get(key), ensure_ascii=False)}")
    return out


# --- claiming the folder --------------------------------------------------------------------------


def _checkpoints(run_dir: Path) -> list[StoredCheckpoint]:
    """Every checkpoint folder of any run (record None where it is damaged: no run id)."""
    return CheckpointStore.of_run(run_dir).list()


def _named_run_id(resume: str) -> Optional[str]:
    if resume in ("auto", "never"):
        return None
    try:
        record = CheckpointRecord.find(Path(resume))
    except CheckpointError:
        return None  # the checkpoint's own checks report a damaged record
    return record.run_id if record is not None else None


def claim_run_folder(run_dir: Path, *, fingerprint: Optional[Fingerprint], resume: str, archive: bool = False,
                     new_data: bool = False) -> RunRecord:
    """The run this command continues or starts in ``run_dir`` (run.json written); refuses to mix two runs.

    ``fingerprint``: :func:`run_fingerprint` of the config (None: not compared, for direct trainer calls).
    ``archive``: move another run's outputs aside instead of refusing (``--archive-old-run``).
    ``new_data``: when only the data differs, continue this run on it (``--continue-with-new-data``).
    """
    run_dir = Path(run_dir)
    record = read_record(run_dir)
    checkpoints = _checkpoints(run_dir)
    named = _named_run_id(resume)
    if record is None and checkpoints and resume != "never":
        # a folder from before run.json: the run that wrote its checkpoints continues (adopted)
        ids = [c.record.run_id for c in checkpoints if c.record is not None and c.record.run_id]
        # fingerprint unknown until a command has trained with these checkpoints (record_fingerprint): the first
        # command may be refused by the vocabulary check and fixed, e.g. text.fold_homophones set back
        record = RunRecord(run_id=ids[-1] if ids else new_run_id(), created=time.strftime("%Y-%m-%dT%H:%M:%S"),
                           fingerprint=None, adopted=True)
        log.info("run folder %s: adopted its %d existing checkpoint(s) as run %s", run_dir, len(checkpoints),
                 record.run_id)
        write_record(run_dir, record)
    if record is None:
        if checkpoints:  # resume: never next to checkpoints of a run nobody recorded
            _refuse_or_archive(run_dir, None, checkpoints, ["checkpoint.resume: never starts a new run"], archive,
                               move_inputs=False)
        record = RunRecord(run_id=named or new_run_id(), created=time.strftime("%Y-%m-%dT%H:%M:%S"),
                           fingerprint=fingerprint)
        write_record(run_dir, record)
        return record

    compared = (record.fingerprint, fingerprint) if fingerprint and record.fingerprint else None  # (old, new)
    differences = describe_differences(*compared) if compared else []
    reasons = list(differences)
    if resume == "never" and checkpoints:
        reasons.append("checkpoint.resume: never starts a new run")
    elif named and named != record.run_id:
        reasons.append(f"checkpoint.resume names a checkpoint of run {named}")
    if not reasons:
        if fingerprint and record.fingerprint and record.fingerprint != fingerprint:  # e.g. a record from before
            record.fingerprint = fingerprint  # defining_only: compared precisely from now on
            write_record(run_dir, record)
        return record
    if new_data and differences and compared and len(reasons) == len(differences) and \
            data_only_differences(*compared):
        log.warning("run folder %s: continuing run %s on changed data (--continue-with-new-data): %s; its "
                    "checkpoints and vocabulary are kept", run_dir, record.run_id, "; ".join(differences))
        record.fingerprint = fingerprint
        write_record(run_dir, record)

        append_event(run_dir, Event.now("data_changed", None, {"changes": differences}))
        return record
    if checkpoints:
        data_only = compared is not None and len(reasons) == len(differences) and data_only_differences(*compared)
        _refuse_or_archive(run_dir, record, checkpoints, reasons, archive, move_inputs=bool(differences),
                           data_only=data_only)
    else:
        log.warning("run folder %s: run %s saved no checkpoint; a new run starts here (%s)", run_dir, record.run_id,
                    "; ".join(reasons))
    record = RunRecord(run_id=named or new_run_id(), created=time.strftime("%Y-%m-%dT%H:%M:%S"),
                       fingerprint=fingerprint)
    write_record(run_dir, record)
    return record


def record_fingerprint(run_dir: Path, fingerprint: Fingerprint) -> None:
    """After training ran with these settings: a run recorded without a fingerprint (adopted, or made by a direct
    trainer call) gets this one, so later commands are compared with it."""
    record = read_record(run_dir)
    if record is not None and record.fingerprint is None:
        record.fingerprint = fingerprint
        write_record(run_dir, record)


def _refuse_or_archive(run_dir: Path, record: Optional[RunRecord], checkpoints: list[StoredCheckpoint], reasons: list[str],
                       archive: bool, *, move_inputs: bool, data_only: bool = False) -> None:
    old_id = record.run_id if record else "without a run id"
    if not archive:
        latest = checkpoints[-1].folder.name
        keep = (f", or add --continue-with-new-data to continue run {old_id} on the changed data (its checkpoints "
                f"and vocabulary kept)" if data_only else "")
        raise RunFolderError(
            f"{run_dir}: holds run {old_id} ({len(checkpoints)} checkpoint(s), latest {latest}) and this command "
            f"would start another run there: {'; '.join(reasons)}. Give the new run its own run.output_dir, or add "
            f"--archive-old-run to move run {old_id} (checkpoints, samples, logs) into "
            f"{run_dir / OLD_RUNS}/<date>_{old_id.replace(' ', '_')}/ first (nothing is deleted){keep}"
        )
    dest = archive_run(run_dir, record, move_inputs=move_inputs)
    log.warning("run folder %s: moved run %s (%d checkpoint(s)) to %s; a new run starts here (%s)", run_dir, old_id,
                len(checkpoints), dest, "; ".join(reasons))


def archive_run(run_dir: Path, record: Optional[RunRecord], *, move_inputs: bool) -> Path:
    """Move one run's outputs (and, with ``move_inputs``, its prepared data and vocabulary) into old_runs/."""
    run_dir = Path(run_dir)
    name = f"{time.strftime('%Y%m%d-%H%M%S')}_{record.run_id if record else 'unrecorded'}"
    dest, n = run_dir / OLD_RUNS / name, 1
    while dest.exists():  # two archives within a second: never mix them
        n += 1
        dest = run_dir / OLD_RUNS / f"{name}-{n}"
    dest.mkdir(parents=True)
    for item in RUN_OUTPUTS + (DERIVED_INPUTS if move_inputs else ()):
        source = run_dir / item
        if source.exists():
            os.replace(source, dest / item)
    return dest
