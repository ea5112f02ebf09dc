"""The fine-tuning recipe, readable top to bottom: setup, train, evaluate, save_checkpoint, cleanup.

It is assembled from parts that each return what they build (docs/DESIGN.md, "Training recipe"):
``session.py`` (runtime, model, data, resume source, batch plan, optimiser, loader: what ``setup``
returns, as a frozen ``Session`` of values and the ``MovingParts`` training changes), ``progress.py``
(step, data position, LR factor, best and last evaluation; saved in the checkpoint; only this module
replaces it, applying what the step and the stability controller return),
``stability_control.py`` (guard, snapshot/rollback, GradScaler, precision fallback),
``stopping.StopCoordinator`` (agreed stop across ranks, abandoned steps, the stop report) and
``step.py`` (one optimizer step). What the pipeline sets up once per command (distributed handle,
run-folder claim, tokenizer) arrives as ``session.RunHandles``, what the run trains on as
``session.TrainInputs``. Around each step: rollbacks and the
fp16 -> bf16/fp32 switch, evaluation every ``evaluation.every_steps``, checkpoints every
``checkpoint.every_steps``, a clean stop on SIGINT/SIGTERM, and a final evaluation and checkpoint.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Optional

import torch
from tqdm.contrib.logging import logging_redirect_tqdm

from xtts_ft.checkpoint_store import CheckpointStore, RetentionPolicy
from xtts_ft.config import Config, dump_config
from xtts_ft.errors import RunFolderError, TrainingStopped
from xtts_ft.layout import step_of
from xtts_ft.model import model_limits
from xtts_ft.run_lock import confirm_held
from xtts_ft.stop_signals import StopRequested, StopSignals
from xtts_ft.train import session
from xtts_ft.train.branch import keep_foreign_aside
from xtts_ft.train.data import Batch, DataReportRecord, Limits, ModelInputs, eval_batches
from xtts_ft.train.disk_budget import check_disk_budget, estimate_run_disk
from xtts_ft.train.distributed import wrap_model
from xtts_ft.train.dvae_stage import fine_tuned_dvae
from xtts_ft.train.early_stopping import RunJudges
from xtts_ft.train.evaluation import evaluate_on_main, language_eval_batches, report_nonfinite_eval
from xtts_ft.train.memory import ddp_ignore, offload_plan, place_modules, release_memory
from xtts_ft.train.metrics import MetricsLogger
from xtts_ft.train.oom import MicroBatchRunner
from xtts_ft.train.progress import Progress
from xtts_ft.train.resume import apply_checkpoint, check_compatible
from xtts_ft.train.rng_state import capture_rng
from xtts_ft.train.save_time import SaveTimeCheck, checkpoint_bytes
from xtts_ft.train.session import (  # noqa: F401 - BatchPlan: interface
    BatchPlan,
    MovingParts,
    RunHandles,
    Session,
    TrainInputs,
)
from xtts_ft.train.stability import StabilityGuard, StepStats, gpt_state_dict, to_cpu
from xtts_ft.train.stability_control import RolledBack, StabilityController
from xtts_ft.train.step import StepAbandoned, StepRunner, model_inputs
from xtts_ft.train.stopping import StopCoordinator
from xtts_ft.train.trainable import apply_trainable, check_resume_trainable
from xtts_ft.training_state import OverfitFinding, TrainingState

log = logging.getLogger(__name__)


@dataclass
class TrainResult:
    step: int
    last_checkpoint: Optional[Path]
    best_checkpoint: Optional[Path]
    stopped_by_signal: bool
    final_eval_loss: Optional[float]
    first_eval_loss: Optional[float]
    data_reports: dict[str, DataReportRecord] = field(default_factory=dict)  # per split: clips kept / rejected per reason
    best_step: Optional[int] = None  # the step of best_checkpoint
    stopped_early: bool = False  # training.early_stopping ended the run before max_steps / max_epochs
    overfit_warning: Optional[OverfitFinding] = None  # the overfitting detector's finding (this run or before)


def train(cfg: Config, inputs: TrainInputs, *, handles: RunHandles) -> TrainResult:
    """Fine-tune the GPT of ``inputs.base`` (text rows grown to ``inputs.vocab_path``) on ``inputs.train_csv``;
    see the module doc. ``handles``: what the pipeline set up for the command (xtts_ft.pipeline).

    torchtune's recipe entry: setup, train (which saves its checkpoints), cleanup."""
    with StopSignals.shared() as signals:  # the command's own (the pipeline entered it), or one for this call
        recipe = FineTuneRecipe(cfg, inputs, handles=handles, signals=signals)
        try:
            try:
                recipe.setup()
            except StopRequested as stop:  # e.g. inside the batch-size probe: nothing new to save
                recipe.stop.where = str(stop)
                return recipe.finish_stop()
            return recipe.train()
        finally:
            recipe.cleanup()


class FineTuneRecipe:
    """The fine-tuning loop. ``setup`` builds, in order: the model, the data, the resume source, the batch plan,
    the optimiser and the stability controller, loads the resume state into them and returns them as a frozen
    :class:`Session` (values) and :class:`MovingParts` (the objects training changes in place); ``train`` runs
    steps until ``session.max_steps`` or a stop. ``self.cfg`` is the config it was given, never replaced
    (``training.max_epochs`` becomes ``session.max_steps``); what else changes while training is the progress
    (replaced here only), the judges' state and the flags below."""

    def __init__(self, cfg: Config, inputs: TrainInputs, *, handles: RunHandles,
                 signals: Optional[StopSignals] = None) -> None:
        self.cfg, self.inputs, self.handles, self.dist = cfg, inputs, handles, handles.dist
        self.run_dir, self.is_main = Path(inputs.run_dir), handles.dist.is_main
        self.stop = StopCoordinator(signals or StopSignals(), self.dist, command_line=inputs.command_line,
                                    config_resume=cfg.checkpoint.resume, run_dir=self.run_dir)
        self.progress = Progress()  # replaced by the checkpoint's on a resume (in setup)
        self.judges = RunJudges(cfg.training, cfg.checkpoint.best_metric)  # early stopping + overfit detector
        self.early_stop = False  # the last evaluation ran out of patience (training.early_stopping)
        self.stopped_early = False  # ... and that ended training before max_steps
        self.last_checkpoint: Optional[Path] = None  # the newest saved or loaded
        self.last_step_seconds = 0.0
        self._session: Optional[Session] = None  # setup() builds it once
        self._parts: Optional[MovingParts] = None  # ... and these
        self._stepper: Optional[StepRunner] = None

    @property
    def session(self) -> Session:
        """What setup built (an error before setup)."""
        if self._session is None:
            raise RuntimeError("FineTuneRecipe.setup() has not run")
        return self._session

    @property
    def parts(self) -> MovingParts:
        """The objects setup built that training changes (an error before setup)."""
        if self._parts is None:
            raise RuntimeError("FineTuneRecipe.setup() has not run")
        return self._parts

    @property
    def stepper(self) -> StepRunner:
        if self._stepper is None:
            raise RuntimeError("FineTuneRecipe.setup() has not run")
        return self._stepper

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return self.parts.opt.optimizer

    # ------------------------------------------------------------------ setup
    def setup(self) -> tuple[Session, MovingParts]:
        cfg, inputs, dist = self.cfg, self.inputs, self.dist
        runtime = session.build_runtime(cfg, dist)
        device = runtime.device
        if self.is_main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            CheckpointStore.of_run(self.run_dir).clean_staging()
        model = session.build_model(cfg, inputs.base, inputs.vocab_path, self.handles.tokenizer, device)
        # what trains (training.trainable): before the optimizer (it takes what requires gradients) and the resume
        trainable = apply_trainable(model.xtts.gpt, cfg.training, inputs.base_vocab_size, seed=cfg.run.seed)
        limits = Limits(**model_limits(model.xtts))
        # every rank checks its disk, before the data, the code cache and the first step; a machine with a run folder
        # of its own keeps only the caches there (rank 0 writes checkpoints, samples and exports)
        estimate = estimate_run_disk(cfg, model.gpt, limits, run_dir=self.run_dir, base_model_pth=inputs.base.model_pth)
        own_caches_only = self.handles.own_folder and not self.is_main
        check_disk_budget(cfg, estimate.caches_only() if own_caches_only else estimate, self.run_dir)
        data = session.load_data(cfg, inputs.train_csv, inputs.eval_csv, self.handles.tokenizer, limits,
                                 model=model, runtime=runtime, run_dir=self.run_dir,
                                 should_stop=lambda: self.stop.requested, own_folder=self.handles.own_folder)
        if self.stop.agreed():  # a cache cut short: the pre-flight would miss codes
            raise StopRequested("the DVAE code cache")
        offloaded = tuple(offload_plan(cfg.training.offload_frozen, cfg.training.cache_dvae_codes))
        place_modules(model, offloaded, torch.device("cpu"))
        release_memory(device)
        source = session.find_resume_source(cfg, self.run_dir, self.handles)

        def batch_inputs(batch: Batch, *, train: bool) -> ModelInputs:
            return model_inputs(model, device, batch, train=train)

        plan = session.plan_batches(cfg.training, runtime, model, data, source.state, batch_inputs)
        # training.max_epochs ends the run before max_steps when it comes first; the schedule (warm-up, cosine) is
        # laid over the steps that will run; with the planned accumulation, what checkpoints record
        max_steps = session.steps_for_epochs(cfg.training, len(data.train_clips), plan.samples_per_step)
        training = dataclasses.replace(cfg.training, grad_accum_steps=plan.grad_accum_steps,
                                       max_steps=cfg.training.max_steps if max_steps is None else max_steps)
        opt = session.build_optimisation(model, training, device, inputs.base_vocab_size)
        trainable.attach(opt.optimizer)  # frozen base-vocabulary rows are put back after each step
        save_time = SaveTimeCheck(cfg.checkpoint.every_steps)
        if self.is_main:  # a stop must save within torchrun's 30 s: warn up front when the disk is too slow
            save_time.estimate(checkpoint_bytes(list(model.gpt.parameters())), self.run_dir)
        guard, policy, rng_state = StabilityGuard(cfg.stability), runtime.policy, None
        if source.state is not None and source.path is not None:  # the checkpoint's state replaces the fresh one
            state = source.state
            check_resume_trainable(state.training_config, training, source.path)  # names the key, before tensors
            check_compatible(state, source.path, vocab_fingerprint=self.handles.vocab_fingerprint,
                             gpt=model.gpt, cfg=cfg)
            point = apply_checkpoint(state, source.path, gpt=model.gpt, optimizer=opt.optimizer, guard=guard,
                                     tcfg=training, policy=policy, device=device, rank=dist.rank,
                                     world_size=dist.world_size,
                                     sampler_key=session.sampler_key(runtime, plan, data, cfg.run.seed),
                                     best_metric=cfg.checkpoint.best_metric)
            self.progress, policy, rng_state, self.last_checkpoint = point.progress, point.policy, point.rng, source.path
            self.judges.load_state_dict(state.early_stopping)
        stability = StabilityController(cfg, device, policy, guard, model=model, optimizer=opt.optimizer,
                                        scaler_state=source.state.scaler if source.state is not None else None)

        sampler, loader = session.build_loader(cfg, runtime, data, plan, self.progress.data_position,
                                               self.progress.step)
        self.progress = replace(self.progress, data_position=sampler.position)
        session.preflight(model, opt.optimizer, runtime, data, plan, offloaded, inputs.base_vocab_size, stability,
                          batch_inputs, trainable.kept)
        if dist.enabled:
            ddp_ignore(model, offloaded)
        ddp_model = wrap_model(model, dist)
        metrics = MetricsLogger(self.run_dir, enabled=self.is_main, max_steps=training.max_steps,
                                start_step=self.progress.step, log_every=training.log_every)
        built = Session(training=training, runtime=runtime, data=data, plan=plan, sampler=sampler, offloaded=offloaded,
                        train_hours=sum(c.num_samples for c in data.train_clips) / limits.sample_rate / 3600)
        parts = MovingParts(model=model, ddp_model=ddp_model, trainable=trainable, opt=opt, stability=stability,
                            metrics=metrics, save_time=save_time)
        runner = MicroBatchRunner(counters=guard, device=device,
                                  describe=lambda batch: data.clip_names(batch["clips"].tolist()),
                                  zero_grads=lambda: opt.optimizer.zero_grad(set_to_none=True), recover=not dist.enabled)
        self._session, self._parts = built, parts
        self._stepper = StepRunner(built, parts, stop=self.stop, runner=runner, batches=iter(loader))
        stability.take_snapshot(self.progress.step)
        if source.path is not None and source.state is not None:
            metrics.event(self.progress.step, "resume", checkpoint=str(source.path))
            metrics.load_interval_state(source.state.log_interval)
        if source.branch is not None:
            metrics.event(self.progress.step, "branch", **source.branch.event())
        log.info("training %d clips on %s (%s): batch %d x accum %d x %d process(es) = effective batch %d; "
                 "steps %d -> %d; DVAE code cache %s; on the CPU: %s", len(data.train_clips), device,
                 stability.policy.name, plan.batch_size, plan.grad_accum_steps, dist.world_size,
                 plan.samples_per_step, self.progress.step, built.max_steps,
                 "on" if cfg.training.cache_dvae_codes else "off", ", ".join(offloaded) or "nothing")
        # last: nothing after it may draw random numbers before step 1
        session.seed_or_restore_rng(rng_state, cfg.run.seed, dist.rank, self.progress.step, device)
        return built, parts

    def effective_config(self) -> Config:
        """The config as this run applies it (each checkpoint's config.yaml): ``session.training`` in place."""
        return dataclasses.replace(self.cfg, training=self.session.training)

    def _failing_files(self, clips: list[int]) -> str:
        return ", ".join(sorted({self.session.data.train_clips[i].audio_path.name for i in clips})[:4])

    # ------------------------------------------------------------------ train
    def train(self) -> TrainResult:
        """Steps until ``session.max_steps`` or a stop. ``self.progress`` is replaced, never changed in place: after a
        step (``StepResult``), after the stability controller's verdict (a rollback), an evaluation and a save."""
        every, s = self.cfg.evaluation.every_steps, self.session
        if self.stop.agreed():  # stopped while caching codes: nothing trained yet
            self.stop.where = "setup"
            return self.finish_stop()
        if self.progress.redo_eval and not self._redo_cut_short_evaluation():
            return self.finish_stop()
        if self.progress.step >= s.max_steps:
            log.info("step %d already reaches training.max_steps=%d: nothing to train", self.progress.step,
                     s.max_steps)
            return self._result(stopped=False)
        if self.judges.stopper is not None and self.judges.stopper.should_stop:  # the same command run again
            self.stopped_early = True
            log.info("early stopping ended this run at step %d (best step %s); to train on, raise "
                     "training.early_stopping.patience or set training.early_stopping.enabled: false",
                     self.progress.step, self.judges.stopper.best_step)
            return self._result(stopped=False)
        redirect = contextlib.nullcontext()
        if self.is_main:
            redirect = logging_redirect_tqdm()
        with redirect:
            stopped = False
            if self.progress.saved_step < 0 and self.cfg.evaluation.eval_at_start:  # a new run (nothing loaded/saved)
                self.evaluate()
                stopped = self.stop.agreed()
            while not stopped and self.progress.step < s.max_steps:
                started = time.perf_counter()
                result = self.stepper.run(self.progress)
                if isinstance(result, StepAbandoned):  # a stop between micro-batches: no update, nothing to count
                    self.progress = replace(self.progress, data_position=result.data_position)
                    stopped = True
                    break
                self.progress = replace(self.progress, step=self.progress.step + 1,
                                        data_position=result.data_position)
                self.last_step_seconds = time.perf_counter() - started
                outcome = self.parts.stability.after_step(result.stats, self.progress.step, self.progress.lr_factor,
                                                          self.parts.metrics, self._log_step(result.stats),
                                                          self._failing_files)
                if isinstance(outcome, RolledBack):  # weights and optimizer are back at an earlier step
                    self.progress = replace(self.progress, step=outcome.to_step, lr_factor=outcome.lr_factor)
                step = self.progress.step
                if result.stats.stop_requested:
                    self.stop.note(f"step {step}")
                    stopped = True
                    break
                new_best = False
                if every and step % every == 0 and step < s.max_steps:
                    new_best = self.evaluate() and self.cfg.checkpoint.keep_best
                    new_best = new_best or (self.cfg.checkpoint.keep_best and self.judges.best_step == step)
                    stopped = self.stop.agreed()
                if (step % self.cfg.checkpoint.every_steps == 0 and step < s.max_steps) or new_best \
                        or stopped or self.early_stop:
                    self.save_checkpoint(final=stopped or self.early_stop)
                if self.early_stop and not stopped:
                    self._stop_early()
                    break
            if not stopped and self.progress.last_eval_step != self.progress.step:
                self.evaluate()
                stopped = self.stop.agreed()
            if self.progress.saved_step != self.progress.step and self.progress.step > 0:  # step 0: nothing trained
                self.save_checkpoint(final=True)
        return self.finish_stop() if stopped else self._result(stopped=False)

    def _log_step(self, stats: StepStats) -> Callable[[], None]:
        self.judges.after_step(stats.loss if stats.good else float("nan"))

        s, parts = self.session, self.parts

        def write() -> None:
            epochs = self.progress.step * s.plan.samples_per_step / len(s.data.train_clips)  # clips drawn / in the set
            parts.metrics.train_step(self.progress.step, stats, lr=self.stepper.lr, guard=parts.stability.guard,
                                 precision=parts.stability.policy.name, epoch=self.progress.epoch,
                                 samples=s.plan.samples_per_step, seconds=self.last_step_seconds,
                                 epochs=epochs, audio_hours=epochs * s.train_hours, **self.stepper.compile_times)
        return write

    def _redo_cut_short_evaluation(self) -> bool:
        """The evaluation a stop abandoned at the checkpoint's step, run now; its results are saved into that
        checkpoint (so ``best_metric`` can pick it). False when a stop cuts it short again."""
        step = self.progress.step
        log.info("resume: the evaluation at step %d was cut short by a stop; running it now", step)
        self.parts.metrics.event(step, "eval_redone")
        self.progress = replace(self.progress, redo_eval=False)
        new_best = self.evaluate()
        if self.stop.agreed():
            return False  # the checkpoint still says eval_pending: the next resume tries again
        if self.progress.last_eval_step == step:
            log.info("resume: saving step %d again with its evaluation%s", step, " (a new best)" if new_best else "")
            self.save_checkpoint()
        return True

    def finish_stop(self) -> TrainResult:
        """After a stop: the last finished step is saved (by the caller); log it, record the event, return."""
        p = self.progress
        metrics = self._parts.metrics if self._parts is not None else None
        self.stop.report(p.step, self.last_checkpoint, p.saved_step == p.step, metrics)
        return self._result(stopped=True)

    def model_inputs(self, batch: Batch, *, train: bool) -> ModelInputs:
        return model_inputs(self.parts.model, self.session.device, batch, train=train)

    # ------------------------------------------------------------------ evaluate
    def evaluate(self) -> bool:
        """Eval losses, then the eval hook (model in eval mode), on rank 0; True when it is a new best under
        ``checkpoint.best_metric`` (every rank gets rank 0's results, so every rank answers the same)."""
        s, parts, step = self.session, self.parts, self.progress.step
        policy, data = parts.stability.policy, s.data
        results, abandoned = None, False
        if self.is_main and data.eval_clips:
            batches = eval_batches(data.eval_clips, s.sampler.batch_size, self.cfg.evaluation.max_eval_batches)
            per_language = language_eval_batches(data.eval_clips, s.sampler.batch_size,
                                                 self.cfg.evaluation.max_eval_batches)
            results = evaluate_on_main(parts.model, data.eval_set, batches, policy.autocast, self.model_inputs,
                                       hook=self.inputs.eval_hook, step=step, offloaded=s.offloaded,
                                       device=s.device, metrics=parts.metrics, language_batches=per_language)
            if results is None:  # saved as eval_pending with this step's checkpoint, redone on resume
                abandoned, self.stop.where = True, f"the evaluation at step {step}"
                self.progress = replace(self.progress, eval_cut_short=step)
        results, abandoned = self.dist.broadcast_object((results, abandoned))
        if abandoned:
            return False
        self.progress = replace(self.progress, last_eval_step=step)
        if results is None:
            return False
        if not math.isfinite(results["eval_loss"]):
            # this step's checkpoint must not carry an older eval loss as its own
            self.progress = replace(self.progress, last_eval_metrics=results, last_eval_loss=None)
            report_nonfinite_eval(results["eval_loss"], step, policy.name, parts.metrics, self.is_main)
            return False
        self.progress, is_best = self.progress.with_evaluation(results["eval_loss"], results,
                                                              self.cfg.checkpoint.best_metric)
        # early stopping and the overfit detector judge every evaluation (every rank has rank 0's results)
        self.early_stop, finding = self.judges.after_eval(step, results)
        if finding is not None and self.is_main:
            self.judges.warn_overfitting(finding, step, parts.metrics)
        return is_best

    def _stop_early(self) -> None:
        self.stopped_early = True
        if self.is_main:
            self.judges.report_early_stop(self.progress.step, self.parts.metrics, self._store(),
                                          self.cfg.checkpoint.best_metric)

    # ------------------------------------------------------------------ save_checkpoint
    def save_checkpoint(self, final: bool = False) -> None:
        """Save this step; a failed save follows ``checkpoint.on_save_error``, except the final one, which always
        stops with an error: nothing is left to continue, and exiting 0 would hide the steps since the last save."""
        p, s, parts, run, inputs = self.progress, self.session, self.parts, self.handles.run, self.inputs
        stability = parts.stability
        self._confirm_run_folder()
        rngs = self.dist.all_gather_object(capture_rng(s.device))
        error = None
        if self.is_main:
            state = TrainingState(
                **p.state_dict(), gpt=to_cpu(gpt_state_dict(parts.model.gpt)), optimizer=self.optimizer.state_dict(),
                scaler=stability.scaler.state_dict(),
                sampler={**s.sampler.state_dict(p.data_position),
                         **session.sampler_key(s.runtime, s.plan, s.data, self.cfg.run.seed)},
                rng=rngs, stability=stability.guard.state_dict(), precision=stability.policy.name,
                training_config=dataclasses.asdict(s.training),
                vocab_fingerprint=self.handles.vocab_fingerprint, base_vocab_size=inputs.base_vocab_size,
                log_interval=parts.metrics.interval_state(), early_stopping=self.judges.state_dict(),
            )
            evaluated = p.last_eval_step == p.step
            try:
                keep_foreign_aside(self.run_dir, p.step, run.owns)  # never overwrite another run's step
                started = time.perf_counter()
                path = self._store().save(
                    state, vocab_path=inputs.vocab_path,
                    write_config=lambda out: dump_config(self.effective_config(), out),
                    run_id=run.run_id, base_model=str(inputs.base.root),
                    eval_loss=p.last_eval_loss if evaluated else None,
                    eval_metrics=dict(p.last_eval_metrics) if evaluated else None,
                    dvae_pth=fine_tuned_dvae(self.run_dir, inputs.base))
                parts.save_time.after_save(time.perf_counter() - started, self.last_step_seconds)
                self._store().apply_retention(RetentionPolicy.from_config(self.cfg.checkpoint), latest=path)
                self.last_checkpoint = path
                parts.metrics.event(p.step, "checkpoint", path=str(path))
            except OSError as exc:
                error = f"{exc.strerror or exc}" + (f" ({exc.filename})" if getattr(exc, "filename", None) else "")
        if not self.dist.all_true(error is None):
            previous = (f"the previous checkpoint ({self.last_checkpoint}) is intact" if self.last_checkpoint
                        else "no earlier checkpoint exists")
            msg = (f"could not write the checkpoint of step {p.step} in {self._store().root}: "
                   f"{error or 'failed on rank 0'}; {previous}")
            if self.cfg.checkpoint.on_save_error == "stop" or final:
                raise TrainingStopped(msg + "; free disk space, then rerun the same command to resume")
            log.error("%s; training continues (checkpoint.on_save_error: continue)", msg)
            return
        self.progress = replace(self.progress, saved_step=p.step)

    def _confirm_run_folder(self) -> None:
        """Before a save: the run folder is still the one rank 0 locked (xtts_ft/run_lock.py ``confirm_held``); a
        folder moved or replaced under the trainer stops every rank with rank 0's line, nothing written there."""
        problem = None
        if self.is_main:
            try:
                confirm_held(self.run_dir)
            except RunFolderError as exc:
                problem = str(exc)
        if not self.dist.all_true(problem is None):
            raise RunFolderError(problem or f"{self.run_dir}: rank 0 found that the run folder was moved or replaced "
                                            f"under it (its line says what to do); stopped without saving")

    def _store(self) -> CheckpointStore:
        """This run's checkpoints (xtts_ft/checkpoint_store.py)."""
        return CheckpointStore.of_run(self.run_dir, owner=self.handles.run.owns)

    # ------------------------------------------------------------------ cleanup
    def _result(self, stopped: bool) -> TrainResult:
        p = self.progress
        best = self._store().best(self.cfg.checkpoint.best_metric) if self.is_main else None
        last, best = self.dist.broadcast_object((self.last_checkpoint, best))
        final = p.last_eval_loss if (p.last_eval_step == p.step or stopped) else None
        best_step = step_of(best.name) if best is not None else None
        if self.is_main and best is not None:
            log.info("best checkpoint (%s): %s (step %d)", self.cfg.checkpoint.best_metric, best, best_step)
        return TrainResult(step=p.step, last_checkpoint=last, best_checkpoint=best, stopped_by_signal=stopped,
                           final_eval_loss=final, first_eval_loss=p.first_eval_loss,
                           data_reports=self._session.data.reports if self._session is not None else {},
                           best_step=best_step, stopped_early=self.stopped_early and not stopped,
                           overfit_warning=self.judges.overfit.finding)

    def cleanup(self) -> None:
        """The loader's workers and the metrics files; the distributed handle belongs to whoever set it up."""
        if self._stepper is not None:
            self._stepper.close()  # shuts the loader's worker processes down
        if self._parts is not None:
            self._parts.metrics.close()
