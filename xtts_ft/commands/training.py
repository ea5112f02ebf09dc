"""``headless_train.py`` (the whole run), ``python -m xtts_ft train`` and ``evaluate``: run functions and the run header."""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import Optional

import torch

from xtts_ft.assess.listener import sample_listener
from xtts_ft.commands.common import command, config_of, report_rerun, setup_logging
from xtts_ft.config import Config
from xtts_ft.config.loading import locate_config
from xtts_ft.evaluate.standalone import evaluate_run
from xtts_ft.pipeline import run_pipeline
from xtts_ft.run_lock import RunLock
from xtts_ft.stop_report import python_command
from xtts_ft.stop_signals import StopRequested, active_signals
from xtts_ft.train.stopping import continue_command

log = logging.getLogger("xtts_ft")


def _rank() -> tuple[int, int]:
    """(RANK, LOCAL_RANK) as torchrun sets them; (0, 0) for a single process."""
    return int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))


def print_header(cfg: Config, config_path: Optional[Path] = None) -> None:
    """The run's summary, from rank 0 only (every rank would print the same)."""
    rank, local_rank = _rank()
    device = "cuda" if cfg.run.device == "auto" and torch.cuda.is_available() else cfg.run.device
    device = "cpu" if device == "auto" else device
    gpu = ""
    if device == "cuda" and torch.cuda.is_available():
        index = local_rank % torch.cuda.device_count()
        torch.cuda.set_device(index)  # first: a CUDA call before it would open a context on GPU 0 in every rank
        gpu = f" ({torch.cuda.get_device_name(index)})"
    if rank != 0:
        return
    t = cfg.training
    log.info("xtts-ft run: %s", cfg.run_dir)
    if config_path is not None:
        log.info("  config      %s", config_path)
    log.info("  device      %s%s, precision %s", device, gpu, cfg.precision.mode)
    log.info("  base model  %s", cfg.base_model.source)
    for ds in cfg.datasets:
        log.info("  dataset     %s (%s, %s)", ds.path, ds.format, cfg.dataset_language(ds))
    log.info(
        "  training    %d optimizer steps, batch %s x accumulation %d, lr %g, warmup %d, schedule %s",
        t.max_steps, t.batch_size, t.grad_accum_steps, t.lr, t.warmup_steps, t.lr_schedule,
    )


@command(stoppable=True)
def headless(args: argparse.Namespace) -> int:
    return _headless(args)


@command(stoppable=True)
def train(args: argparse.Namespace) -> int:
    return _headless(argparse.Namespace(**vars(args), evaluate=False, checkpoint=None))


@command(stoppable=True)
def evaluate(args: argparse.Namespace) -> int:
    return _headless(argparse.Namespace(**{**vars(args), "evaluate": True}))  # the parser sets it too


def _headless(args: argparse.Namespace) -> int:
    cfg = config_of(args)
    # A trainer locks its run folder before it writes anything there, train.log included: a second one is refused
    # with nothing written (xtts_ft/run_lock.py). The command line took it before this module loaded
    # (cli.run_command); this re-entrant hold is for a caller of this function alone. Under torchrun rank 0 takes it
    # (there, and in the pipeline, where a refusal reaches every rank); --evaluate only reads.
    lock = RunLock(cfg.run_dir)
    if not args.evaluate and int(os.environ.get("WORLD_SIZE", "1") or 1) == 1:
        lock.acquire()
    try:
        return _headless_run(args, cfg)
    finally:
        lock.release()


def _headless_run(args: argparse.Namespace, cfg: Config) -> int:
    setup_logging(cfg.run_dir if _rank()[0] == 0 else None, args.verbose)  # one writer of train.log
    # the config was read before logging started: say now which file a bare name found (configs/NAME.yaml)
    print_header(cfg, locate_config(args.config))
    if args.evaluate:
        try:
            report = evaluate_run(cfg, Path(args.checkpoint) if args.checkpoint else None, sample_listener)
        except StopRequested as stop:  # the half-done samples are gone; the run folder records the stop
            signals = active_signals()
            report_rerun(str(stop), signals.signal_name if signals else None, getattr(args, "command_line", None),
                         run_dir=cfg.run_dir if cfg.run_dir.is_dir() else None)
            return 0
        log.info("report: %s", report)
        return 0
    started_as = getattr(args, "command_line", None)
    command_line = ([python_command(), *started_as[0]], started_as[1]) if started_as else None
    result = run_pipeline(cfg, archive_old_run=args.archive_old_run, command_line=command_line,
                          new_data=args.continue_with_new_data)
    if _rank()[0] != 0:  # the closing summary names rank 0's files: rank 0 prints it
        return 0
    log.info("stopped." if result.stopped_by_signal else "done.")
    trained = result.training  # None: stopped before training
    last = trained.last_checkpoint if trained is not None else None
    log.info("  last checkpoint  %s", last)
    if trained is not None and trained.best_checkpoint:
        log.info("  best checkpoint  %s (step %s, by checkpoint.best_metric %s)", trained.best_checkpoint,
                 trained.best_step, cfg.checkpoint.best_metric)
    if trained is not None and trained.stopped_early:
        log.info("  early stopping   ended training: no improvement for %d evaluations",
                 cfg.training.early_stopping.patience)
    if trained is not None and trained.overfit_warning:
        log.info("  overfitting      seen from step %s on (best step %s): see events.jsonl and the report",
                 trained.overfit_warning.get("at_step"), trained.overfit_warning.get("best_step"))
    if result.best_export:
        log.info("  best exported    %s", result.best_export)
    log.info("  samples          %s", result.samples_dir)
    log.info("  report           %s", result.report)
    if trained is not None and trained.first_eval_loss is not None and trained.final_eval_loss is not None:
        log.info("  eval loss        %.4f -> %.4f", trained.first_eval_loss, trained.final_eval_loss)
    if result.stopped_by_signal:
        log.info("stopped early; resume with: %s",
                 continue_command(command_line, cfg.checkpoint.resume, cfg.run_dir, last))
    return 0
