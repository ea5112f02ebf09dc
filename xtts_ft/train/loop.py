"""The fine-tuning loop, readable top to bottom: setup, train (train_step), evaluate, save_checkpoint, cleanup.

One optimizer step (``train_step``):

1. ``lr = get_lr(step) * lr_factor`` on every param group (a pure function of the step);
2. ``grad_accum_steps`` micro-batches: forward through the (DDP) wrapper under the precision
   policy's autocast, ``scaler.scale(loss / accum).backward()`` (DDP all-reduces on the last one);
   a micro-batch that runs out of GPU memory is split in halves or its clip skipped (``oom.py``);
3. ``scaler.unscale_``, then clip to ``grad_clip`` (the norm is of unscaled gradients);
4. one fetch of losses, finite-loss count, grad norm and loss scale (the step's only sync);
5. all finite: ``optimizer.step()`` (+ the new-token row LR correction) and ``scaler.update()``;
   otherwise the step is skipped and counted (stability.py); ``zero_grad``.

Setup resolves ``batch_size: auto`` and ``effective_batch_size`` and keeps the frozen modules on the
CPU with ``offload_frozen`` (``memory.py``). Around the step: rollbacks and the fp16 -> bf16/fp32
switch (``_after_step``), evaluation every ``evaluation.every_steps``, checkpoints every
``checkpoint.every_steps``, a clean stop on SIGINT/SIGTERM, and a final evaluation and checkpoint.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import torch

from xtts_ft.base_model import BaseModelFiles
from xtts_ft.config import Config, TrainingConfig, dump_config
from xtts_ft.errors import CheckpointError, DataError, TrainingStopped
from xtts_ft.evaluate.best_metric import best_score
from xtts_ft.layout import RunLayout
from xtts_ft.model import XttsTrainingModel, build_training_model, model_limits
from xtts_ft.run_folder import claim_run_folder, set_aside_foreign
from xtts_ft.tokenizer.fingerprint import vocab_fingerprint
from xtts_ft.train import checkpoint as ckpt
from xtts_ft.train.branch import set_aside_later_steps
from xtts_ft.train.codes_cache import build_codes_cache, codes_for_batch
from xtts_ft.train.cpu_threads import apply_cpu_plan
from xtts_ft.train.data import ClipDataset, Limits, collate, eval_batches, load_clips, make_loader
from xtts_ft.train.disk_budget import check_disk_budget, estimate_run_disk
from xtts_ft.train.distributed import MainFirst, cleanup_distributed, setup_distributed, wrap_model
from xtts_ft.train.dvae_stage import fine_tuned_dvae
from xtts_ft.train.evaluation import eval_losses
from xtts_ft.train.hooks import EvalHook, FaultInjector, TrainingHooks
from xtts_ft.train.memory import (
    ddp_ignore,
    enable_gradient_checkpointing,
    modules_on,
    offload_plan,
    place_modules,
    plan_accumulation,
    probe_batch_size,
    release_memory,
)
from xtts_ft.train.metrics import MetricsLogger
from xtts_ft.train.oom import MicroBatchRunner
from xtts_ft.train.precision import apply_tf32, fallback_policy, make_scaler, resolve_precision, scale_tensor
from xtts_ft.train.preflight import check_forward_backward, check_setup, pick_check_clips
from xtts_ft.train.resume import apply_checkpoint, check_compatible, choose_checkpoint
from xtts_ft.train.sampler import ItemKey, ResumableBatchSampler
from xtts_ft.train.save_time import SaveTimeCheck, checkpoint_bytes
from xtts_ft.train.schedule import NewTokenRows, build_optimizer, get_lr, set_lr
from xtts_ft.train.signals import StopRequested, StopSignals, raise_if_stopped
from xtts_ft.train.slim import slim_older_checkpoints
from xtts_ft.train.stability import (
    Snapshot,
    StabilityGuard,
    StepStats,
    diagnose_nonfinite,
    fetch_step_stats,
    gpt_state_dict,
    pin_snapshots,
    to_cpu,
)
from xtts_ft.train.state_record import TrainingState
from xtts_ft.train.stopping import CommandLine, StepStart, continue_command, write_stop_event

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchPlan:
    """What one optimizer step consumes: ``batch_size`` clips x ``grad_accum_steps`` micro-batches x ranks."""

    batch_size: int
    grad_accum_steps: int
    world_size: int

    @property
    def samples_per_step(self) -> int:
        return self.batch_size * self.grad_accum_steps * self.world_size


@dataclass
class TrainResult:
    step: int
    last_checkpoint: Optional[Path]
    best_checkpoint: Optional[Path]
    stopped_by_signal: bool
    final_eval_loss: Optional[float]
    first_eval_loss: Optional[float]
    data_reports: dict = field(default_factory=dict)  # per split: clips kept / rejected per reason


def train(cfg: Config, *, base: BaseModelFiles, vocab_path: Path, base_vocab_size: int, train_csv: Path,
          eval_csv: Path, run_dir: Path, eval_hook: Optional[EvalHook] = None,
          max_steps_override: Optional[int] = None, command_line: Optional[CommandLine] = None) -> TrainResult:
    """Fine-tune the GPT of ``base`` (text rows grown to ``vocab_path``) on ``train_csv``; see the module doc.

    ``command_line`` (prefix, arguments): how the run was started, for the resume command printed after a stop.
    """
    return run_training(cfg, base=base, vocab_path=vocab_path, base_vocab_size=base_vocab_size, train_csv=train_csv,
                        eval_csv=eval_csv, run_dir=run_dir, eval_hook=eval_hook, max_steps_override=max_steps_override,
                        command_line=command_line)


def run_training(cfg: Config, *, tokenizer=None, model_factory: Optional[Callable] = None,
                 fault_injector: Optional[FaultInjector] = None, **kwargs) -> TrainResult:
    """``train`` plus test hooks: a ready tokenizer, a model factory, and a fault injector (:class:`TrainingHooks`)."""
    hooks = TrainingHooks(tokenizer=tokenizer, model_factory=model_factory, fault_injector=fault_injector)
    recipe = FineTuneRecipe(cfg, hooks=hooks, **kwargs)
    with StopSignals.shared() as signals:  # the command's own (the pipeline entered it), or one for this call
        recipe.signals = signals
        try:
            try:
                recipe.setup()
            except StopRequested as stop:  # e.g. inside the batch-size probe: nothing new to save
                recipe.stop_where = str(stop)
                return recipe.finish_stop()
            return recipe.train()
        finally:
            recipe.cleanup()


class FineTuneRecipe:
    """The fine-tuning loop. ``setup`` builds, in order: the model, the data (clips and DVAE codes), the
    batch plan, the optimizer and the resume state; then ``train`` runs steps until max_steps or a stop.
    Every attribute is declared here (None until setup builds it); ``self.cfg`` never changes after this."""

    def __init__(self, cfg: Config, *, base: BaseModelFiles, vocab_path: Path, base_vocab_size: int, train_csv: Path,
                 eval_csv: Path, run_dir: Path, eval_hook: Optional[EvalHook] = None,
                 max_steps_override: Optional[int] = None, command_line: Optional[CommandLine] = None,
                 hooks: Optional[TrainingHooks] = None):
        if max_steps_override is not None:
            training = dataclasses.replace(cfg.training, max_steps=int(max_steps_override))
            cfg = dataclasses.replace(cfg, training=training)
        self.cfg, self.tcfg = cfg, cfg.training
        self.base, self.vocab_path, self.base_vocab_size = base, Path(vocab_path), int(base_vocab_size)
        self.train_csv, self.eval_csv, self.run_dir = Path(train_csv), Path(eval_csv), Path(run_dir)
        self.eval_hook = eval_hook
        self.hooks = hooks or TrainingHooks()
        self.tokenizer = self.hooks.tokenizer
        self.command_line = command_line
        # built by setup(), in this order
        self.device: Optional[torch.device] = None
        self.is_main = True
        self.cpu_plan = None
        self.model: Optional[XttsTrainingModel] = None
        self.vocab_fp = ""
        self.limits: Optional[Limits] = None
        self.policy = None
        self.train_clips: list = []
        self.eval_clips: list = []
        self.data_reports: dict = {}
        self.train_set: Optional[ClipDataset] = None
        self.eval_set: Optional[ClipDataset] = None
        self.offloaded: tuple = ()
        self.plan: Optional[BatchPlan] = None
        self.optimizer: Optional[torch.optim.Optimizer] = None
        self.trainable: list = []
        self.save_time: Optional[SaveTimeCheck] = None
        self.new_rows: Optional[NewTokenRows] = None
        self.guard: Optional[StabilityGuard] = None
        self.scaler = None
        self.sampler: Optional[ResumableBatchSampler] = None
        self.data_position: tuple[int, int] = (0, 0)
        self.ddp_model = None
        self.runner: Optional[MicroBatchRunner] = None
        self.snapshot: Optional[Snapshot] = None
        self.lr = 0.0
        self.stop_where: Optional[str] = None  # what the run was doing when it noticed a stop request
        self.run = None  # the run folder's RunRecord: whose checkpoints are ours
        self.branch = None  # later steps set aside by a resume from an older checkpoint (branch.py)
        self.max_steps = self.tcfg.max_steps
        self.signals = StopSignals()
        self.dist = self.metrics = self.train_iter = None
        self.step, self.lr_factor, self.fresh = 0, 1.0, True
        self.first_eval_loss = self.best_eval_loss = self.last_eval_loss = None
        self.last_eval_metrics: dict = {}
        self.best_score: Optional[float] = None  # under checkpoint.best_metric when it is not eval_loss
        self.last_eval_step = self.saved_step = -1
        self.eval_cut_short = -1  # the step whose evaluation a stop abandoned (saved as eval_pending, redone on resume)
        self.redo_eval = False  # resumed from a checkpoint whose evaluation a stop abandoned
        self.last_step_seconds = 0.0
        self.last_checkpoint: Optional[Path] = None
        self.last_bad: tuple[list[dict], list[int]] = ([], [])
        self._rng_state: Optional[dict] = None

    # ------------------------------------------------------------------ setup
    def setup(self) -> None:
        cfg, tcfg = self.cfg, self.tcfg
        self.dist = setup_distributed(cfg.run.device)
        self.device, self.is_main = self.dist.device, self.dist.is_main
        self.cpu_plan = apply_cpu_plan(tcfg.cpu_threads, tcfg.num_workers, self.device.type)
        if self.is_main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            ckpt.clean_staging(self.run_dir)
        # the pipeline claimed the folder already (with the run's fingerprint); direct callers are checked here
        record = claim_run_folder(self.run_dir, fingerprint=None, resume=cfg.checkpoint.resume) if self.is_main else None
        self.run = self.dist.broadcast_object(record)
        self.model = self._build_model()
        self.vocab_fp = vocab_fingerprint(self.vocab_path)
        self.limits = Limits(**model_limits(self.model.xtts))
        # every rank checks (same disk, same answer), before the data, the code cache and the first step
        check_disk_budget(cfg, estimate_run_disk(cfg, self.model.gpt, run_dir=self.run_dir,
                                                 base_model_pth=self.base.model_pth), self.run_dir)
        self.policy = resolve_precision(cfg.precision.mode, self.device)
        apply_tf32(cfg.precision.tf32, self.device)  # process-wide: set with the run's device, not at import

        # data: every clip checked up front; DVAE codes cached once
        self.train_clips, self.eval_clips, self.data_reports = self._load_data()
        self.train_set, self.eval_set = self._prepare_codes()
        if not self.dist.all_true(not self.signals.requested):  # a cache cut short: the pre-flight would miss codes
            raise StopRequested("the DVAE code cache")
        self.offloaded = offload_plan(tcfg.offload_frozen, tcfg.cache_dvae_codes)
        place_modules(self.model, self.offloaded, torch.device("cpu"))
        release_memory(self.device)
        chosen = choose_checkpoint(cfg.checkpoint.resume, self.run_dir, self.run.owns) if self.is_main else None
        path = self.dist.broadcast_object(chosen)
        state = ckpt.load_training_state(path) if path is not None else None
        if state is not None and self.is_main and cfg.checkpoint.resume not in ("auto", "never"):
            # resume from a named (older) checkpoint: this run's later steps are kept, never overwritten (branch.py)
            self.branch = set_aside_later_steps(self.run_dir, int(state.step), self.run.owns)
        self.plan = self._plan_batches(state)
        batch_size = self.plan.batch_size

        # optimizer, scaler, stability; then the checkpoint (if any) overrides the fresh state
        self.optimizer = build_optimizer(self.model.gpt, tcfg, self.device)
        self.trainable = [p for g in self.optimizer.param_groups for p in g["params"]]
        self.save_time = SaveTimeCheck(cfg.checkpoint.every_steps)
        if self.is_main:  # a stop must save within torchrun's 30 s: warn up front when the disk is too slow
            self.save_time.estimate(checkpoint_bytes(list(self.model.gpt.parameters())), self.run_dir)
        self.new_rows = NewTokenRows(self.model.gpt, self.base_vocab_size, tcfg.new_token_lr_multiplier)
        self.guard = StabilityGuard(cfg.stability)
        position = self._restore(state, path) if state is not None else (0, 0)
        self.scaler = make_scaler(self.policy, cfg.precision)
        if state is not None and self.policy.scaler_enabled and state.scaler:
            self.scaler.load_state_dict(state.scaler)

        self.sampler = ResumableBatchSampler([c.num_samples for c in self.train_clips], batch_size, cfg.run.seed,
                                             rank=self.dist.rank, world_size=self.dist.world_size,
                                             bucketing=tcfg.length_bucketing, start=position)
        self.data_position = self.sampler.position
        self._preflight(batch_size)
        if self.dist.enabled:
            ddp_ignore(self.model, self.offloaded)
        self.ddp_model = wrap_model(self.model, self.dist)
        self.runner = MicroBatchRunner(counters=self.guard, device=self.device, describe=self._clip_names,
                                       zero_grads=lambda: self.optimizer.zero_grad(set_to_none=True),
                                       recover=not self.dist.enabled)
        loader = make_loader(self.train_set, self.sampler, num_workers=self.cpu_plan.workers,
                             pin_memory=self.device.type == "cuda",
                             base_seed=(cfg.run.seed * 1_000_003 + self.step * 101 + self.dist.rank) % 2**31)
        self.train_iter = iter(loader)
        self.snapshot = Snapshot(pinned=pin_snapshots(self.device))  # page-locked host memory on a GPU
        self.snapshot.take(self.step, self.model.gpt, self.optimizer)
        self.metrics = MetricsLogger(self.run_dir, enabled=self.is_main, max_steps=self.max_steps, start_step=self.step,
                                     log_every=tcfg.log_every)
        if path is not None:
            self.metrics.event(self.step, "resume", checkpoint=str(path))
            self.metrics.load_interval_state(state.log_interval)
        if self.branch is not None:
            self.metrics.event(self.step, "branch", **self.branch.event())
        log.info("training %d clips on %s (%s): batch %d x accum %d x %d process(es) = effective batch %d; "
                 "steps %d -> %d; DVAE code cache %s; on the CPU: %s", len(self.train_clips), self.device,
                 self.policy.name, batch_size, self.plan.grad_accum_steps, self.dist.world_size,
                 self.plan.samples_per_step,
                 self.step, self.max_steps, "on" if tcfg.cache_dvae_codes else "off",
                 ", ".join(self.offloaded) or "nothing")
        self._seed_or_restore_rng()  # last: nothing after it may draw random numbers before step 1

    def _build_model(self) -> XttsTrainingModel:
        """The training model on the device (the run's tokenizer first, unless a test hook gave one)."""
        if self.tokenizer is None:
            from xtts_ft.text_settings import TextSettings, make_tokenizer

            self.tokenizer = make_tokenizer(self.vocab_path, TextSettings.from_config(self.cfg))
        model = (self.hooks.model_factory or build_training_model)(self.base, self.vocab_path, self.tokenizer)
        model.to(self.device)
        if self.tcfg.gradient_checkpointing:
            enable_gradient_checkpointing(model.xtts.gpt)
        model.train()
        return model

    def _load_data(self) -> tuple[list, list, dict]:
        """(train clips, eval clips, per-split reports): every clip checked up front."""
        lang, show = self.cfg.run.language, self.is_main
        train_clips, train_report = load_clips(self.train_csv, self.tokenizer, lang, self.limits, progress=show)
        eval_clips, eval_report = load_clips(self.eval_csv, self.tokenizer, lang, self.limits, progress=show)
        for report in (train_report, eval_report):
            if self.is_main:
                (log.warning if report.rejected else log.info)("data: %s", report.summary())
        if not train_clips:
            raise DataError(f"{self.train_csv}: no usable training clip; {train_report.summary()}")
        if not eval_clips and self.is_main:
            log.warning("data: %s has no usable clip: eval losses are skipped", self.eval_csv)
        return train_clips, eval_clips, {"train": train_report.to_dict(), "eval": eval_report.to_dict()}

    def _prepare_codes(self) -> tuple[ClipDataset, ClipDataset]:
        """(train set, eval set); with the cache, codes of every clip on disk (rank 0 computes, the others reuse)."""
        paths = None
        if self.tcfg.cache_dvae_codes:
            cache_dir = RunLayout(self.run_dir).codes_cache
            clips = self.train_clips + self.eval_clips
            stop = lambda: self.signals.requested  # noqa: E731

            def build() -> list[Path]:  # on a shared run dir the other ranks find every code cached
                return build_codes_cache(self.model, clips, cache_dir, self.device, progress=self.is_main,
                                         should_stop=stop)

            # rank 0 first; the others wait on MainFirst's long-timeout gloo group, not on the default (NCCL)
            # group, whose watchdog would abort them after COLLECTIVE_TIMEOUT on a large dataset or slow disk
            paths = MainFirst(self.dist).run("the DVAE code cache", build)
        n = len(self.train_clips)
        common = dict(sample_rate=self.limits.sample_rate, cond_min_s=self.tcfg.min_conditioning_s,
                      cond_max_s=self.tcfg.max_conditioning_s, seed=self.cfg.run.seed)
        return (ClipDataset(self.train_clips, train=True, code_paths=paths[:n] if paths else None, **common),
                ClipDataset(self.eval_clips, train=False, code_paths=paths[n:] if paths else None, **common))

    def _plan_batches(self, state: Optional[TrainingState]) -> BatchPlan:
        """The micro-batch size (``auto``: reused from the checkpoint, else probed) and the accumulation."""
        tcfg, world = self.tcfg, self.dist.world_size
        auto = tcfg.batch_size == "auto"
        saved = int(state.sampler.get("batch_size", -1)) if state is not None else -1
        if auto and saved > 0:  # the same batches as before the stop: exact resume
            size = saved
            log.info("batch_size auto: %d, as in the checkpoint (exact resume); start a new run dir to probe again",
                     size)
        elif auto:
            def inputs_or_stop(batch: dict, *, train: bool) -> dict:  # each try may take seconds on a GPU
                raise_if_stopped("the batch-size probe")
                return self.model_inputs(batch, train=train)

            choice = probe_batch_size(self.model, self.train_set, self.train_clips, inputs_or_stop,
                                      self.policy.autocast, self.device, rank=self.dist.rank, world_size=world,
                                      effective=tcfg.effective_batch_size)
            size = min(self.dist.all_gather_object(choice.size))  # every rank must fit
        else:
            size = int(tcfg.batch_size)
        size, accum = plan_accumulation(size, tcfg.effective_batch_size, world, tcfg.grad_accum_steps,
                                        lower_batch=auto and saved <= 0)
        if tcfg.effective_batch_size is not None:
            log.info("effective batch: %d x %d accumulation x %d process(es) = %d (training.effective_batch_size %d)",
                     size, accum, world, size * accum * world, tcfg.effective_batch_size)
        return BatchPlan(batch_size=size, grad_accum_steps=accum, world_size=world)

    def effective_config(self) -> Config:
        return dataclasses.replace(self.cfg, training=self.effective_training())

    def effective_training(self) -> TrainingConfig:
        """training config with the planned accumulation (what the checkpoint records and resume compares)."""
        return dataclasses.replace(self.tcfg, grad_accum_steps=self.plan.grad_accum_steps)

    def _restore(self, state: TrainingState, path: Path) -> tuple[int, int]:
        """Continue from a verified checkpoint; returns the sampler position."""
        check_compatible(state, path, vocab_fingerprint=self.vocab_fp, gpt=self.model.gpt, cfg=self.cfg)
        point = apply_checkpoint(
            state, path, gpt=self.model.gpt, optimizer=self.optimizer, guard=self.guard, tcfg=self.effective_training(),
            policy=self.policy, device=self.device, rank=self.dist.rank, world_size=self.dist.world_size,
            sampler_key=self._sampler_key(),
        )
        self.step, self.fresh, self.saved_step, self.last_checkpoint = point.step, False, point.step, path
        self.redo_eval = bool(state.eval_pending)
        self.lr_factor, self.policy, self._rng_state = point.lr_factor, point.policy, point.rng
        self.first_eval_loss, self.best_eval_loss, self.last_eval_loss = (
            point.first_eval_loss, point.best_eval_loss, point.last_eval_loss)
        return point.position

    def _sampler_key(self) -> dict:
        """What must not change for the saved data position to mean the same batches."""
        return {"world_size": self.dist.world_size, "batch_size": self.plan.batch_size, "num_clips": len(self.train_clips),
                "seed": self.cfg.run.seed}

    def _seed_or_restore_rng(self) -> None:
        if self._rng_state is not None:
            ckpt.restore_rng(self._rng_state, self.device)
            return
        seed = self.cfg.run.seed + 7919 * self.dist.rank + self.step
        random.seed(seed)
        np.random.seed(seed % 2**32)
        torch.manual_seed(seed)

    def _items(self, dataset: ClipDataset, indices: list[int]) -> dict:
        return collate([dataset[ItemKey(i, 0, 0, slot, self.dist.rank)] for slot, i in enumerate(indices)])

    def _preflight(self, batch_size: int) -> None:
        check_setup(self.model, self.optimizer, self.device, self.offloaded)
        tokens = [c.tokens for c in self.train_clips]
        vocab_rows = self.model.gpt.text_embedding.weight.shape[0]
        picked = pick_check_clips(tokens, self.base_vocab_size, vocab_rows, batch_size)
        inputs = self.model_inputs(self._items(self.train_set, picked), train=True)
        check_forward_backward(self.model, inputs, self.policy.autocast, self.base_vocab_size, self.device,
                               scaler=self.scaler)

    # ------------------------------------------------------------------ train
    def train(self) -> TrainResult:
        if not self.dist.all_true(not self.signals.requested):  # stopped while caching codes: nothing trained yet
            self.stop_where = "setup"
            return self.finish_stop()
        if self.redo_eval and not self._redo_cut_short_evaluation():
            return self.finish_stop()
        if self.step >= self.max_steps:
            log.info("step %d already reaches training.max_steps=%d: nothing to train", self.step, self.max_steps)
            return self._result(stopped=False)
        redirect = contextlib.nullcontext()
        if self.is_main:
            from tqdm.contrib.logging import logging_redirect_tqdm

            redirect = logging_redirect_tqdm()
        with redirect:
            stopped = False
            if self.fresh and self.cfg.evaluation.eval_at_start:
                self.evaluate()
                stopped = self._stop_agreed()
            while not stopped and self.step < self.max_steps:
                started = time.perf_counter()
                stats = self.train_step()
                if stats is None:  # a stop between micro-batches: the step was abandoned, nothing changed
                    stopped = True
                    break
                self.step += 1
                self._after_step(stats, time.perf_counter() - started)
                if stats.stop_requested:
                    self.stop_where = self.stop_where or f"step {self.step}"
                    stopped = True
                    break
                every = self.cfg.evaluation.every_steps
                new_best = False
                if every and self.step % every == 0 and self.step < self.max_steps:
                    new_best = self.evaluate() and self.cfg.checkpoint.keep_best
                    stopped = self._stop_agreed()
                if (self.step % self.cfg.checkpoint.every_steps == 0 and self.step < self.max_steps) or new_best \
                        or stopped:
                    self.save_checkpoint(final=stopped)
            if not stopped:
                if self.last_eval_step != self.step:
                    self.evaluate()
                    stopped = self._stop_agreed()
            if self.saved_step != self.step and self.step > 0:  # step 0 of a new run: nothing trained to save
                self.save_checkpoint(final=True)
        return self.finish_stop() if stopped else self._result(stopped=False)

    def _redo_cut_short_evaluation(self) -> bool:
        """The evaluation a stop abandoned at the checkpoint's step, run now; its results are saved into that
        checkpoint (so ``best_metric`` can pick it). False when a stop cuts it short again."""
        log.info("resume: the evaluation at step %d was cut short by a stop; running it now", self.step)
        self.metrics.event(self.step, "eval_redone")
        self.redo_eval = False
        new_best = self.evaluate()
        if self._stop_agreed():
            return False  # the checkpoint still says eval_pending: the next resume tries again
        if self.last_eval_step == self.step:
            log.info("resume: saving step %d again with its evaluation%s", self.step, " (a new best)" if new_best else "")
            self.save_checkpoint()
        return True

    def _stop_agreed(self) -> bool:
        """Whether any process was asked to stop (a collective call: every rank makes it at the same point)."""
        return not self.dist.all_true(not self.signals.requested)

    def finish_stop(self) -> TrainResult:
        """After a stop: the last finished step is saved (by the caller); log it, record the event, return."""
        where = self.stop_where or f"step {self.step}"
        if self.is_main:
            hint = continue_command(self.command_line, self.cfg.checkpoint.resume, self.run_dir, self.last_checkpoint)
            saved = (f"saved {self.last_checkpoint}" if self.last_checkpoint is not None and self.saved_step == self.step
                     else "nothing new to save" if self.step == 0 or self.saved_step == self.step
                     else f"the last checkpoint is {self.last_checkpoint}")
            log.warning("stopped by %s during %s; %s. Resume with: %s", self.signals.signal_name, where, saved, hint)
            event = {"signal": self.signals.signal_name, "during": where, "checkpoint": self.last_checkpoint,
                     "resume_command": hint}
            if self.metrics is not None and self.metrics.enabled:
                self.metrics.event(self.step, "stop", **{k: str(v) if isinstance(v, Path) else v
                                                         for k, v in event.items()})
            else:
                write_stop_event(self.run_dir, {"step": self.step, "event": "stop", **event})
        return self._result(stopped=True)

    def train_step(self):
        """One optimizer step over ``grad_accum_steps`` micro-batches; returns the fetched StepStats."""
        accum = self.plan.grad_accum_steps
        lr = get_lr(self.step, self.tcfg) * self.lr_factor
        set_lr(self.optimizer, lr)
        fault = self.hooks.fault_injector(self.step) if self.hooks.fault_injector else None
        rows, kept_inputs, kept_clips = [], [], []

        def forward(piece: dict) -> tuple[torch.Tensor, torch.Tensor]:
            inputs = self.model_inputs(piece, train=True)
            with self.policy.autocast():
                # a copy of cond_idxs: the GPT edits it in place
                out = self.ddp_model(**{**inputs, "cond_idxs": inputs["cond_idxs"].clone()})
            loss = out["loss"] * float("nan") if fault == "loss_nan" else out["loss"]
            kept_inputs.append(inputs)
            kept_clips.extend(piece["clips"].tolist())
            return loss, torch.stack([loss.detach(), out["loss_text_ce"].detach(), out["loss_mel_ce"].detach()])

        self.runner.begin()  # an out-of-memory micro-batch is split or skipped (oom.py)
        # a stop between micro-batches abandons the step (single process: every rank would have to agree)
        start = None if self.dist.enabled else StepStart.capture(self.data_position, self.device)
        for micro in range(accum):
            if start is not None and self.signals.requested:
                self.optimizer.zero_grad(set_to_none=True)
                self.data_position = start.restore(self.device)
                self.stop_where = f"step {self.step + 1} (abandoned after {micro} of {accum} micro-batches)"
                return None
            batch = next(self.train_iter)
            self.data_position = self.sampler.next_position(*batch["position"])
            last = micro == accum - 1
            sync = self.ddp_model.no_sync() if (self.dist.enabled and not last) else contextlib.nullcontext()
            with sync:
                row = self.runner.run(batch, 1.0 / (len(batch["clips"]) * accum), forward,
                                      lambda loss: self.scaler.scale(loss).backward(), step=self.step)
            if row is not None:
                rows.append(row)
        for event in self.runner.events:
            self.metrics.event(self.step + 1, **event)
        if not self.runner.finish([p.grad for p in self.trainable]):  # every clip ran out of memory: no update
            self.optimizer.zero_grad(set_to_none=True)
            self.lr = lr
            nan = float("nan")
            return StepStats(loss=nan, loss_text_ce=nan, loss_mel_ce=nan, finite_losses=0, expected_losses=0,
                             grad_norm=0.0, loss_scale=float(self.scaler.get_scale()),
                             stop_requested=self.signals.requested)
        if fault == "grad_nan":
            self.trainable[0].grad.view(-1)[0] = float("nan")
        self.scaler.unscale_(self.optimizer)
        if self.tcfg.grad_clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(self.trainable, self.tcfg.grad_clip)
        else:
            norm = torch.nn.utils.get_total_norm([p.grad for p in self.trainable if p.grad is not None])
        stop_flag = torch.full((1,), float(self.signals.requested), device=self.device)
        stats = fetch_step_stats(rows, norm, scale_tensor(self.scaler, self.device), stop_flag,
                                 all_reduce=self.dist.all_reduce_sum if self.dist.enabled else None,
                                 world_size=self.dist.world_size)
        if stats.good:
            self.new_rows.before_step()
            self.optimizer.step()
            self.new_rows.after_step()
            self.scaler.update()
        else:
            self.last_bad = (kept_inputs, kept_clips)
            if self.scaler.is_enabled():  # an overflow backs the scale off; a bad loss leaves it
                self.scaler.update() if stats.loss_ok else self.scaler.update(new_scale=stats.loss_scale)
        self.optimizer.zero_grad(set_to_none=True)
        self.lr = lr
        return stats

    def model_inputs(self, batch: dict, *, train: bool) -> dict:
        """A collated batch -> XttsTrainingModel.forward arguments on the device (prompt mels and codes in fp32)."""
        nb = self.device.type == "cuda"
        to = lambda t: t.to(self.device, non_blocking=nb)  # noqa: E731
        codes = to(batch["codes"]) if "codes" in batch else codes_for_batch(self.model, to(batch["wav"]))
        return {"text_inputs": to(batch["padded_text"]), "text_lengths": to(batch["text_lengths"]),
                "audio_codes": codes, "wav_lengths": to(batch["wav_lengths"]),
                "cond_mels": self.model.conditioning_mels(to(batch["conditioning"])),
                "cond_idxs": to(batch["cond_idxs"]) if train else None, "cond_lens": None}

    def _after_step(self, stats, seconds: float) -> None:
        self.last_step_seconds = seconds
        outcome = self.guard.record(stats)
        pcfg = self.cfg.precision
        if self.scaler.is_enabled() and not stats.grad_ok and stats.loss_scale * pcfg.backoff_factor < pcfg.min_scale:
            self._switch_precision(stats.loss_scale * pcfg.backoff_factor)
            outcome = "skip"
        self.metrics.train_step(self.step, stats, lr=self.lr, guard=self.guard, precision=self.policy.name,
                                epoch=self.data_position[0], samples=self.plan.samples_per_step, seconds=seconds)
        if outcome == "rollback":
            failed_at = self.step
            self.step = self.snapshot.restore(self.model.gpt, self.optimizer)  # the loss scale stays as it is
            self.lr_factor *= self.cfg.stability.rollback_lr_factor
            self.guard.note_rollback()
            log.warning("%d non-finite steps in a row at step %d: rolled back to step %d with the LR x%g "
                        "(rollback %d of %d)",
                        self.cfg.stability.max_consecutive_bad_steps, failed_at, self.step, self.lr_factor,
                        self.guard.rollbacks, self.cfg.stability.max_rollbacks)
            self.metrics.event(self.step, "rollback", failed_at=failed_at, lr_factor=self.lr_factor)
        elif outcome == "stop":
            self._stop_with_diagnosis()
        elif outcome == "ok" and self.step - (self.snapshot.step or 0) >= self.cfg.stability.snapshot_every:
            self.snapshot.take(self.step, self.model.gpt, self.optimizer)

    def _switch_precision(self, scale: float) -> None:
        new = fallback_policy(self.policy, self.device)
        log.critical("loss scale fell to %g, below precision.min_scale=%g: fp16 keeps overflowing. Switching this run "
                     "from %s to %s (set precision.mode: %s to start there)", scale, self.cfg.precision.min_scale,
                     self.policy.name, new.name, new.name)
        self.metrics.event(self.step, "precision_switch", old=self.policy.name, new=new.name, loss_scale=scale)
        self.policy = new
        self.scaler = make_scaler(new, self.cfg.precision)  # disabled: bf16 and fp32 need no loss scaling
        self.guard.consecutive_bad = 0

    def _clip_names(self, batch: dict) -> str:
        names = [self.train_clips[i].audio_path.name for i in batch["clips"].tolist()]
        return ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")

    def _stop_with_diagnosis(self) -> None:
        inputs, clips = self.last_bad
        where = diagnose_nonfinite(self.model, inputs, self.policy.autocast)
        files = ", ".join(sorted({self.train_clips[i].audio_path.name for i in clips})[:4]) or "unknown"
        self.metrics.event(self.step, "stopped", diagnosis=where)
        raise TrainingStopped(
            f"training stopped at step {self.step}: {self.guard.consecutive_bad} non-finite steps in a row after "
            f"{self.guard.rollbacks} rollback(s) (stability.max_rollbacks); diagnosis: {where}. Advice: lower "
            f"training.lr (now {self.tcfg.lr:g} x {self.lr_factor:g}), set precision.mode: fp32 (now "
            f"{self.policy.name}), and check the data of the failing batch ({files})"
        )

    # ------------------------------------------------------------------ evaluate
    def evaluate(self) -> bool:
        """Eval losses, then the eval hook (model in eval mode), on rank 0; True when the eval loss is a new best."""
        result, abandoned = None, False
        if self.is_main and self.eval_clips:
            self.model.eval()
            try:
                batches = eval_batches(self.eval_clips, self.sampler.batch_size, self.cfg.evaluation.max_eval_batches)
                losses = eval_losses(self.model, self.eval_set, batches, self.policy.autocast, self.model_inputs)
                extra = {}
                if self.eval_hook is not None:
                    extra = self._run_eval_hook()
            except StopRequested:  # the stop comes first: the step is saved, this evaluation is redone on resume
                abandoned = True
                self.eval_cut_short = self.step
                self.stop_where = f"the evaluation at step {self.step}"
                log.warning("stop requested: the evaluation at step %d is abandoned", self.step)
            finally:
                self.model.train()
            if not abandoned:
                self.metrics.evaluation(self.step, losses, extra)
                result = losses["eval_loss"]
                self.last_eval_metrics = {**losses, **extra}
        result, abandoned = self.dist.broadcast_object((result, abandoned))
        if abandoned:
            return False
        self.last_eval_step = self.step
        if result is not None and not math.isfinite(result):
            self._report_nonfinite_eval(result)
            return False
        if result is None:
            return False
        self.last_eval_loss = result
        if self.first_eval_loss is None:
            self.first_eval_loss = result
        is_best = self.best_eval_loss is None or result < self.best_eval_loss
        if is_best:
            self.best_eval_loss = result
        if self.cfg.checkpoint.best_metric != "eval_loss":  # by CER etc.: xtts_ft/evaluate/best_metric.py
            score = self.dist.broadcast_object(best_score(self.cfg.checkpoint.best_metric, self.last_eval_metrics))
            is_best = score is not None and (self.best_score is None or score < self.best_score)
            self.best_score = score if is_best else self.best_score
        return is_best

    def _report_nonfinite_eval(self, value: float) -> None:
        """A NaN/Inf eval loss is a finding, not a gap: warned, recorded, and kept out of best/last losses."""
        self.last_eval_loss = None  # this step's checkpoint must not carry an older eval loss as its own
        if self.is_main:
            log.warning("eval loss at step %d is %s (%s): the model's eval outputs overflow; this checkpoint gets no "
                        "eval loss and cannot become the best one. If it repeats, set precision.mode: fp32 or lower "
                        "training.lr", self.step, value, self.policy.name)
            self.metrics.event(self.step, "eval_nonfinite", eval_loss=str(value), precision=self.policy.name)

    def _run_eval_hook(self) -> dict[str, float]:
        """The integrator's hook (sample synthesis). Its random draws are isolated from training's, and a
        failure inside it is logged with its traceback instead of ending hours of training."""
        try:  # offloaded modules (training.offload_frozen) are on the device for synthesis, on the CPU after it
            with modules_on(self.model, self.offloaded, self.device), \
                    torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
                extra = self.eval_hook(self.step, self.model) or {}
        except Exception as exc:  # noqa: BLE001 - any hook bug; reported, training continues
            log.exception("eval hook failed at step %d; training continues", self.step)
            self.metrics.event(self.step, "eval_hook_failed", error=f"{type(exc).__name__}: {exc}")
            return {}
        return {k: float(v) for k, v in extra.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}

    # ------------------------------------------------------------------ save_checkpoint
    def save_checkpoint(self, final: bool = False) -> None:
        """Save this step; a failed save follows ``checkpoint.on_save_error``, except the final one, which always
        stops with an error: nothing is left to continue, and exiting 0 would hide the steps since the last save."""
        rngs = self.dist.all_gather_object(ckpt.capture_rng(self.device))
        error = None
        if self.is_main:
            state = TrainingState(
                step=self.step, epoch=self.data_position[0], gpt=to_cpu(gpt_state_dict(self.model.gpt)),
                optimizer=self.optimizer.state_dict(), scaler=self.scaler.state_dict(),
                sampler=self._sampler_state(), rng=rngs, stability=self.guard.state_dict(),
                lr_factor=self.lr_factor, precision=self.policy.name, first_eval_loss=self.first_eval_loss,
                best_eval_loss=self.best_eval_loss, last_eval_loss=self.last_eval_loss,
                training_config=dataclasses.asdict(self.effective_training()), vocab_fingerprint=self.vocab_fp,
                base_vocab_size=self.base_vocab_size, log_interval=self.metrics.interval_state(),
                eval_pending=self.eval_cut_short == self.step,
            )
            meta = {"epoch": self.data_position[0], "vocab_fingerprint": self.vocab_fp,
                    "base_model": str(self.base.root),
                    "eval_loss": self.last_eval_loss if self.last_eval_step == self.step else None,
                    "eval_metrics": self.last_eval_metrics if self.last_eval_step == self.step else None,
                    "precision": self.policy.name, "base_vocab_size": self.base_vocab_size, "run_id": self.run.run_id,
                    "eval_pending": self.eval_cut_short == self.step}
            try:
                self._keep_foreign_checkpoint()
                started = time.perf_counter()
                path = ckpt.save_checkpoint(self.run_dir, state, meta, vocab_path=self.vocab_path,
                                            write_config=lambda p: dump_config(self.effective_config(), p),
                                            dvae_pth=fine_tuned_dvae(self.run_dir, self.base))
                self.save_time.after_save(time.perf_counter() - started, self.last_step_seconds)
                ckpt.prune_checkpoints(self.run_dir, self.cfg.checkpoint.keep_last, self.cfg.checkpoint.keep_best,
                                       owner=self.run.owns, metric=self.cfg.checkpoint.best_metric)
                if self.cfg.checkpoint.optimizer_state == "latest":
                    slim_older_checkpoints(self.run_dir, path, owner=self.run.owns)
                self.last_checkpoint = path
                self.metrics.event(self.step, "checkpoint", path=str(path))
            except OSError as exc:
                error = f"{exc.strerror or exc}" + (f" ({exc.filename})" if getattr(exc, "filename", None) else "")
        if not self.dist.all_true(error is None):
            previous = (f"the previous checkpoint ({self.last_checkpoint}) is intact" if self.last_checkpoint
                        else "no earlier checkpoint exists")
            msg = (f"could not write the checkpoint of step {self.step} in {self.run_dir / 'checkpoints'}: "
                   f"{error or 'failed on rank 0'}; {previous}")
            if self.cfg.checkpoint.on_save_error == "stop" or final:
                raise TrainingStopped(msg + "; free disk space, then rerun the same command to resume")
            log.error("%s; training continues (checkpoint.on_save_error: continue)", msg)
            return
        self.saved_step = self.step

    def _keep_foreign_checkpoint(self) -> None:
        """A folder of this step's name that another run wrote is moved aside, never overwritten."""
        target = ckpt.checkpoint_root(self.run_dir) / ckpt.step_dir_name(self.step)
        if not target.is_dir():
            return
        try:
            meta = ckpt.read_meta(target)
        except CheckpointError:
            meta = {}
        if not self.run.owns(meta):
            set_aside_foreign(self.run_dir, target)

    def _sampler_state(self) -> dict:
        return {**self.sampler.state_dict(self.data_position), **self._sampler_key()}

    # ------------------------------------------------------------------ cleanup
    def _result(self, stopped: bool) -> TrainResult:
        best = (ckpt.best_checkpoint(self.run_dir, self.run.owns, metric=self.cfg.checkpoint.best_metric)
                if self.is_main and self.run is not None else None)
        last, best = self.dist.broadcast_object((self.last_checkpoint, best))
        final = self.last_eval_loss if (self.last_eval_step == self.step or stopped) else None
        return TrainResult(step=self.step, last_checkpoint=last, best_checkpoint=best, stopped_by_signal=stopped,
                           final_eval_loss=final, first_eval_loss=self.first_eval_loss, data_reports=self.data_reports)

    def cleanup(self) -> None:
        self.train_iter = None  # shuts the loader's worker processes down
        if self.metrics is not None:
            self.metrics.close()
        if self.dist is not None:
            cleanup_distributed(self.dist)
