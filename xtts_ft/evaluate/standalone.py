"""``headless_train.py --evaluate``: samples and report for one checkpoint, outside training."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

from xtts_ft.base_model import BaseModelFiles, resolve_base_model
from xtts_ft.checkpoint_store import CheckpointRecord, CheckpointStore
from xtts_ft.config import BaseModelConfig, Config
from xtts_ft.errors import CheckpointError
from xtts_ft.layout import META_FILE, CheckpointLayout, RunLayout, step_of

log = logging.getLogger(__name__)


def refuse_folder_of_checkpoints(ckpt_dir: Path) -> None:
    """``--checkpoint RUN/checkpoints`` (or the run folder): name the step folders it holds, the newest as the example."""
    ckpt_dir = Path(ckpt_dir)
    if CheckpointStore.is_checkpoint(ckpt_dir) or CheckpointLayout(ckpt_dir).state.is_file():
        return
    for parent in (ckpt_dir, RunLayout(ckpt_dir).checkpoints):
        steps = sorted((p for p in parent.iterdir() if p.is_dir() and step_of(p.name) is not None),
                       key=lambda p: step_of(p.name)) if parent.is_dir() else []
        if steps:
            shown = ", ".join(p.name for p in steps[-5:])
            more = f"{len(steps) - 5} more, " if len(steps) > 5 else ""
            raise CheckpointError(f"--checkpoint {ckpt_dir}: holds checkpoints, it is not one ({more}{shown}); pass "
                                  f"one of them, e.g. --checkpoint {steps[-1]}")


def base_for_checkpoint(ckpt_dir: Path, source: Optional[str] = None) -> BaseModelFiles:
    """The base model a checkpoint was trained from (its record), unless ``source`` names another."""
    if not Path(ckpt_dir).is_dir():
        raise CheckpointError(f"--checkpoint {ckpt_dir}: folder not found")
    refuse_folder_of_checkpoints(ckpt_dir)
    if source is None:
        record = CheckpointRecord.find(Path(ckpt_dir))
        if record is None:
            raise CheckpointError(f"{ckpt_dir}: no {META_FILE}; pass --base-model with the base model folder or "
                                  f"repo id")
        source = record.base_model
        if not source:
            raise CheckpointError(f"{ckpt_dir}: its checkpoint record does not name its base model; pass --base-model")
    return resolve_base_model(BaseModelConfig(source=str(source)))


def evaluate_run(cfg: Config, checkpoint: Optional[Path] = None) -> Path:
    """Synthesise the configured sentences with ``checkpoint`` (default: latest) and rewrite the report."""
    from xtts_ft.evaluate.hook import make_eval_hook
    from xtts_ft.evaluate.infer import load_checkpoint_folder
    from xtts_ft.evaluate.references import pick_references
    from xtts_ft.evaluate.report import write_report
    from xtts_ft.run_folder import read_record

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
    base = resolve_base_model(cfg.base_model)
    xtts, tokenizer, meta = load_checkpoint_folder(Path(ckpt), base)
    refs = pick_references(cfg.evaluation, RunLayout(run_dir).data, cfg.run.language)
    from xtts_ft.evaluate.intelligibility import load_eval_recognizer
    from xtts_ft.evaluate.languages import language_evals

    hook = make_eval_hook(cfg, run_dir, tokenizer, refs.speaker_wavs, refs.eval_clips, refs.seconds_per_char_range,
                          recognizer=load_eval_recognizer(cfg),
                          languages=language_evals(cfg, RunLayout(run_dir).data))
    metrics = hook(int(meta["step"]), xtts)
    log.info("evaluated %s: %s", ckpt, ", ".join(f"{k}={v:.3g}" for k, v in metrics.items()))
    return write_report(run_dir)
