"""Every name inside a run directory and a checkpoint folder, defined once.

Readers and writers build paths through :class:`RunLayout` (``RunLayout(cfg.run_dir).metrics``)
and :class:`CheckpointLayout` (``CheckpointLayout(folder).meta``); the names themselves are the
module constants, for code that only needs a name (a glob, a list of outputs). Checkpoint folders are
the exception: their paths (``CHECKPOINTS_DIR``, ``step_dir_name``) are built and listed only by the
CheckpointStore (xtts_ft/checkpoint_store.py; utils/import_graph.py enforces it), so RunLayout has no
``checkpoints``; :func:`is_checkpoint` (what resume takes) and :func:`holds_weights` (what export loads)
are defined here, below the config that checks ``checkpoint.resume``.

::

    <run.output_dir>/                 RunLayout
      run.json  trainer.lock  old_runs/  config.yaml  summary.json  report.html
      data/  (metadata_train.csv, metadata_eval.csv, wavs/, report.json/.txt/.png; a dataset list: datasets/<i>_<name>/)
      tokenizer/vocab.json, report.json  cache/dvae_codes/  dvae/ (dvae.pth, dvae_state.pt, report.json: dvae.finetune)
      checkpoints/step_000500/        CheckpointLayout: training_state.pt, meta.json, vocab.json, config.yaml
      samples/step_000500/*.wav  samples/index.jsonl
      metrics.jsonl  events.jsonl  tensorboard/
      exports/step_000500/  app_process.json  app_console.log   (written by the web app, xtts_ft/webapp/)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

# --- a checkpoint folder ---------------------------------------------------------------------
STATE_FILE = "training_state.pt"
META_FILE = "meta.json"
VOCAB_FILE = "vocab.json"
CONFIG_FILE = "config.yaml"
STEP_DIR_PATTERN = re.compile(r"^step_(\d+)$")

# --- a run directory -------------------------------------------------------------------------
RUN_FILE = "run.json"
LOCK_FILE = "trainer.lock"  # the running trainer's OS lock on the folder, and who it is (xtts_ft/run_lock.py)
# rank 0's token for this command: a machine that reads it sees rank 0's run folder (xtts_ft/train/machine_folders.py)
MACHINE_TOKEN = "machine_token"
OLD_RUNS = "old_runs"
BRANCHES_DIR = "branches"  # branches/<date>_after_step_NNNNNN/: later steps set aside by a resume from an older one
DATA_DIR = "data"
TRAIN_CSV = "metadata_train.csv"
EVAL_CSV = "metadata_eval.csv"
DATASETS_SUBDIR = "datasets"  # data/datasets/<i>_<name>/: one prepared dataset of a dataset list
# Each stage's report in its own folder: data/ (and each data/datasets/<i>_<name>/: counts, hours, rejections by
# reason), tokenizer/ (new tokens, tokens per character), dvae/ (held-out reconstruction loss before and after).
STAGE_REPORT = "report.json"
DATA_REPORT_TEXT = "report.txt"  # data/: the prepare report for a person (rejection examples)
DATA_REPORT_PLOT = "report.png"  # data/: durations and speaking rates of kept and rejected clips
TOKENIZER_DIR = "tokenizer"
CACHE_DIR = "cache"
CODES_CACHE = "dvae_codes"
DVAE_DIR = "dvae"  # dvae/: the DVAE stage (xtts_ft/train/dvae_stage.py): dvae.pth, its resumable state, report.json
DVAE_FILE = "dvae.pth"  # the DVAE weights file, as coqui/XTTS-v2 names it (also in a checkpoint of a DVAE run)
DVAE_STATE_FILE = "dvae_state.pt"  # the DVAE stage's resumable state (weights, optimizer, step)
CHECKPOINTS_DIR = "checkpoints"
SAMPLES_DIR = "samples"
INDEX_FILE = "index.jsonl"  # samples/index.jsonl: one record per evaluation
CER_FLOOR_FILE = "cer_floor.json"  # samples/cer_floor.json: the recogniser's CER on the real eval recordings
REFERENCE_QUALITY_FILE = "reference_quality.json"  # samples/: the predicted quality of the real eval recordings
METRICS_FILE = "metrics.jsonl"
EVENTS_FILE = "events.jsonl"
TENSORBOARD_DIR = "tensorboard"
REPORT_FILE = "report.html"
SUMMARY_FILE = "summary.json"
EXPORTS_DIR = "exports"  # exports/step_000500/: exports made from the web app's Listen tab
# The web app's record of the training process it started for this folder (pid, command), and that
# process's console output: how a restarted app finds a run that is still going.
APP_PROCESS_FILE = "app_process.json"
APP_CONSOLE_LOG = "app_console.log"

# --- a folder a command writes outside the run directory (xtts_ft/output_folder.py) ------------
OUTPUT_MARKER = ".xtts_ft_output.json"  # which command wrote the folder, when, and which files
EARLIER_INGESTS = "earlier_ingests"  # ingest --add-to-existing: the reports of the sessions before

#: What a training run writes at the top of its folder (moved aside together by --archive-old-run); exports made
#: from its checkpoints go with it. The web app's process record and console log stay: the app writes them for the
#: process it is starting, before that process moves the old run aside.
RUN_OUTPUTS = (CHECKPOINTS_DIR, SAMPLES_DIR, TENSORBOARD_DIR, METRICS_FILE, EVENTS_FILE, REPORT_FILE,
               SUMMARY_FILE, CONFIG_FILE, RUN_FILE, BRANCHES_DIR, EXPORTS_DIR)


def step_dir_name(step: int) -> str:
    """``step_000500``: the folder name of the checkpoint (and the samples) of one step."""
    return f"step_{int(step):06d}"


def step_of(name: str) -> Optional[int]:
    """The step a ``step_NNNNNN`` folder name stands for; None for any other name."""
    m = STEP_DIR_PATTERN.match(name)
    return int(m.group(1)) if m else None


def branch_dir_name(stamp: str, step: int) -> str:
    """``<stamp>_after_step_000002``: the folder under ``branches/`` of the steps a resume from ``step`` set aside."""
    return f"{stamp}_after_{step_dir_name(step)}"


@dataclass(frozen=True)
class _Folder:
    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))


class _In:
    """A path inside a layout's folder, ``root / parts``: ``RunLayout(d).train_csv`` is ``d/data/metadata_train.csv``
    (a descriptor, so that each name below is one line and reads as a Path to the type checker)."""

    def __init__(self, *parts: str) -> None:
        self.parts = parts

    def __get__(self, layout: _Folder, owner: Optional[type] = None) -> Path:
        return layout.root.joinpath(*self.parts)


class CheckpointLayout(_Folder):
    """The files of one checkpoint folder (``checkpoints/step_NNNNNN/``)."""

    @property
    def folder(self) -> Path:
        return self.root

    state = _In(STATE_FILE)
    meta = _In(META_FILE)
    vocab = _In(VOCAB_FILE)
    config = _In(CONFIG_FILE)
    dvae = _In(DVAE_FILE)  # only in a run with the DVAE stage

    @property
    def step(self) -> Optional[int]:
        return step_of(self.root.name)


def is_checkpoint(folder: Path) -> bool:
    """Whether ``folder`` is a checkpoint this project wrote: it holds its record (``meta.json``); nothing verified.

    The one definition ("what resume continues from"); ``CheckpointStore.is_checkpoint`` is this function. It
    sits here, below the config, so that the config's check of ``checkpoint.resume`` asks the same question.
    """
    return CheckpointLayout(folder).meta.is_file()


def holds_weights(folder: Path) -> bool:
    """Whether ``folder`` holds a training state (``training_state.pt``): what export and synthesis load, from a
    checkpoint this project wrote or a coqui-trainer-style folder (``CheckpointStore.holds_weights``)."""
    return CheckpointLayout(folder).state.is_file()


class RunLayout(_Folder):
    """The files and folders of one run directory (``run.output_dir``)."""

    run_file = _In(RUN_FILE)
    lock_file = _In(LOCK_FILE)
    machine_token = _In(MACHINE_TOKEN)
    old_runs = _In(OLD_RUNS)
    branches = _In(BRANCHES_DIR)
    config = _In(CONFIG_FILE)
    data = _In(DATA_DIR)
    train_csv = _In(DATA_DIR, TRAIN_CSV)
    eval_csv = _In(DATA_DIR, EVAL_CSV)
    listed_datasets = _In(DATA_DIR, DATASETS_SUBDIR)
    data_report = _In(DATA_DIR, STAGE_REPORT)
    tokenizer = _In(TOKENIZER_DIR)
    vocab = _In(TOKENIZER_DIR, VOCAB_FILE)
    tokenizer_report = _In(TOKENIZER_DIR, STAGE_REPORT)
    cache = _In(CACHE_DIR)
    codes_cache = _In(CACHE_DIR, CODES_CACHE)
    dvae = _In(DVAE_DIR)
    dvae_report = _In(DVAE_DIR, STAGE_REPORT)
    samples = _In(SAMPLES_DIR)
    samples_index = _In(SAMPLES_DIR, INDEX_FILE)
    cer_floor = _In(SAMPLES_DIR, CER_FLOOR_FILE)
    reference_quality = _In(SAMPLES_DIR, REFERENCE_QUALITY_FILE)
    # the history files (samples_index above, metrics, events): only xtts_ft/run_history.py opens them
    metrics = _In(METRICS_FILE)
    events = _In(EVENTS_FILE)
    tensorboard = _In(TENSORBOARD_DIR)
    report = _In(REPORT_FILE)
    summary = _In(SUMMARY_FILE)
    exports = _In(EXPORTS_DIR)
    app_process = _In(APP_PROCESS_FILE)
    app_console = _In(APP_CONSOLE_LOG)

    def samples_at(self, step: int) -> Path:
        return self.samples / step_dir_name(step)
