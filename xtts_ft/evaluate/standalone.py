"""``headless_train.py --evaluate``: samples and report for one checkpoint, outside training."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable, Optional

from xtts_ft.asr.recognizer import Recognizer
from xtts_ft.checkpoint_store import CheckpointRecord, CheckpointStore
from xtts_ft.config import Config
from xtts_ft.errors import CheckpointError
from xtts_ft.evaluate.hook import make_eval_hook
from xtts_ft.evaluate.intelligibility import load_eval_recognizer
from xtts_ft.evaluate.languages import language_evals
from xtts_ft.evaluate.listening import SampleListener
from xtts_ft.evaluate.references import pick_references
from xtts_ft.evaluate.report import write_report
from xtts_ft.inference.loading import load_checkpoint_folder
from xtts_ft.layout import RunLayout
from xtts_ft.random_model import resolve_or_create_base_model
from xtts_ft.run_folder import read_record

log = logging.getLogger(__name__)


def evaluate_run(cfg: Config, checkpoint: Optional[Path] = None,
                 listener_for: Optional[Callable[[Config, Optional[Recognizer]], Optional[SampleListener]]] = None) -> Path:
    """Synthesise the configured sentences with ``checkpoint`` (default: latest) and rewrite the report.

    ``listener_for(cfg, recognizer)``: the samples' listener (:func:`xtts_ft.assess.listener.sample_listener`,
    from above this package); None: the samples are not listened to."""
    run_dir = cfg.run_dir
    record = read_record(run_dir)
    ckpt = checkpoint or CheckpointStore.of_run(run_dir, record.owns if record else None).latest()
    if ckpt is None:
        raise CheckpointError(f"{run_dir}: no checkpoint to evaluate; train first or pass --checkpoint")
    checkpoint_record = CheckpointRecord.read(Path(ckpt))
    theirs = checkpoint_record.run_id
    if record is not None and not record.owns(checkpoint_record):
        raise CheckpointError(
            f"--checkpoint {ckpt}: belongs to run {theirs or '(unrecorded)'}, not to run {record.run_id} of {run_dir}; "
            f"evaluating it here would put its samples and report row into this run. Pass the --config of its own "
            f"run (or a run.output_dir of its own)"
        )
    base = resolve_or_create_base_model(cfg.base_model)  # the run's own config: a demo's tiny base is rebuilt
    xtts, tokenizer, meta = load_checkpoint_folder(Path(ckpt), base)
    refs = pick_references(cfg.evaluation, RunLayout(run_dir).data, cfg.run.language)
    recognizer = load_eval_recognizer(cfg)
    hook = make_eval_hook(cfg, run_dir, tokenizer, refs.speaker_wavs, refs.eval_clips, refs.seconds_per_char_range,
                          recognizer=recognizer, languages=language_evals(cfg, RunLayout(run_dir).data),
                          listener=listener_for(cfg, recognizer) if listener_for is not None else None)
    metrics = hook(int(meta["step"]), xtts)
    log.info("evaluated %s: %s", ckpt, ", ".join(f"{k}={v:.3g}" for k, v in metrics.items()))
    return write_report(run_dir)
