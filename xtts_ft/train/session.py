"""Session setup of the training recipe: each function builds one thing and returns it.

``FineTuneRecipe.setup`` (train/loop.py) calls them in order: the runtime (device, precision, CPU
threads) around the distributed handle the pipeline set up, the model, the data (checked clips, the
DVAE code cache, the datasets), the resume state, the batch plan, the optimiser, the sampler and
loader, the pre-flight check and the random streams, and keeps what they built in two objects:

- :class:`Session`: what setup decided, values that stay as they are for the whole run (the training
  settings as applied, where it runs, the batch plan, the checked data and its sampler);
- :class:`MovingParts`: the objects whose state training changes in place, step after step (the model's
  weights, the optimizer's moments, the stability controller's scaler and precision, the metrics'
  interval, the save-time check). Which objects they are is fixed at setup; what is in them moves.

Nothing here stores into the recipe. What a run trains on arrives as :class:`TrainInputs`; what the
pipeline sets up once per command (distributed handle, run-folder claim, tokenizer, vocabulary
fingerprint) as :class:`RunHandles`.
"""

from __future__ import annotations

import logging
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Protocol, Sequence

import numpy as np
import torch

from xtts_ft.base_model import BaseModelFiles
from xtts_ft.checkpoint_store import CheckpointRecord, CheckpointStore
from xtts_ft.config import Config, TrainingConfig
from xtts_ft.errors import ConfigError, DataError
from xtts_ft.gpt_compile import MAX_SHAPES, CompiledBlocks, compile_enabled, longest_row
from xtts_ft.layout import RunLayout
from xtts_ft.model import XttsTrainingModel, build_training_model
from xtts_ft.stop_signals import raise_if_stopped
from xtts_ft.tokenizer.voice_tokenizer import AmharicTokenizer
from xtts_ft.train.branch import Branch, set_aside_later_steps
from xtts_ft.train.codes_cache import build_codes_cache
from xtts_ft.train.cpu_threads import CpuPlan, apply_cpu_plan
from xtts_ft.train.data import (
    Batch,
    BatchInputs,
    Clip,
    ClipDataset,
    DataReportRecord,
    Limits,
    ModelInputs,
    collate,
    load_clips,
    make_loader,
)
from xtts_ft.train.distributed import DistContext, MainFirst
from xtts_ft.train.hooks import EvalHook
from xtts_ft.train.memory import enable_gradient_checkpointing, plan_accumulation, probe_batch_size
from xtts_ft.train.metrics import MetricsLogger
from xtts_ft.train.precision import PrecisionPolicy, apply_tf32, resolve_precision
from xtts_ft.train.preflight import check_forward_backward, check_setup, pick_check_clips
from xtts_ft.train.resume import choose_checkpoint
from xtts_ft.train.rng_state import restore_rng
from xtts_ft.train.sampler import ItemKey, ResumableBatchSampler
from xtts_ft.train.save_time import SaveTimeCheck
from xtts_ft.train.schedule import NewTokenRows, build_optimizer
from xtts_ft.train.stability_control import StabilityController
from xtts_ft.train.stopping import CommandLine
from xtts_ft.train.trainable import TrainableSetup
from xtts_ft.training_state import RngState, SamplerKey, TrainingState

log = logging.getLogger(__name__)


class RunOwner(Protocol):
    """The run folder's record as the recipe uses it (``run_folder.RunRecord``, which the recipe never imports:
    the pipeline claims the folder and hands the record in)."""

    run_id: str

    def owns(self, checkpoint: Optional[CheckpointRecord]) -> bool: ...


@dataclass(frozen=True)
class TrainInputs:
    """What one training run reads, besides the config (litgpt's TrainArgs: one typed value, not 13 parameters)."""

    base: BaseModelFiles
    """The base model's files (with a fine-tuned ``dvae_pth`` after the DVAE stage)."""
    vocab_path: Path
    """The run's vocab.json: the GPT's text rows are grown to it."""
    base_vocab_size: int
    """Token ids below it are the base model's (their rows are kept under ``training.trainable`` freeze/lora)."""
    train_csv: Path
    """The prepared training metadata (``data/metadata_train.csv``)."""
    eval_csv: Path
    """The prepared evaluation metadata (``data/metadata_eval.csv``)."""
    run_dir: Path
    """The run folder: checkpoints, metrics, events."""
    eval_hook: Optional[EvalHook] = None
    """Called on rank 0 after each evaluation (the pipeline's sample synthesis); None: eval losses only."""
    command_line: Optional[CommandLine] = None
    """(prefix, arguments) the run was started with: the resume command printed after a stop."""


@dataclass(frozen=True)
class RunHandles:
    """What the pipeline sets up once per command and hands to the recipe."""

    dist: DistContext
    run: RunOwner  # the run folder's record: ``run_id`` and ``owns(meta)``, whose checkpoints are this run's
    tokenizer: AmharicTokenizer  # the run's tokenizer (text_settings.make_tokenizer of vocab.json)
    vocab_fingerprint: str  # of vocab.json: checkpoints record it, a resume must match it
    own_folder: bool = False  # this rank's machine keeps a run folder of its own (train/machine_folders.py)


@dataclass(frozen=True)
class Runtime:
    dist: DistContext
    device: torch.device
    cpu_plan: CpuPlan  # threads and loader workers
    policy: PrecisionPolicy  # the precision the run starts with (the stability controller may fall back)

    @property
    def is_main(self) -> bool:
        return self.dist.is_main


@dataclass(frozen=True)
class BatchPlan:
    """What one optimizer step consumes: ``batch_size`` clips x ``grad_accum_steps`` micro-batches x ranks."""

    batch_size: int
    grad_accum_steps: int
    world_size: int

    @property
    def samples_per_step(self) -> int:
        return self.batch_size * self.grad_accum_steps * self.world_size


@dataclass(frozen=True)
class TrainingData:
    """The checked clips and their datasets, read once in setup (the datasets read clips, they never change)."""

    train_clips: list[Clip]
    eval_clips: list[Clip]
    reports: dict[str, DataReportRecord]  # per split: clips kept / rejected per reason
    train_set: ClipDataset
    eval_set: ClipDataset

    def clip_names(self, indices: list[int], limit: int = 4) -> str:
        names = [self.train_clips[i].audio_path.name for i in indices]
        return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


@dataclass(frozen=True)
class Optimisation:
    optimizer: torch.optim.Optimizer
    trainable: list[torch.nn.Parameter]  # the parameters it updates (gradient clipping and the step's norm)
    new_rows: NewTokenRows  # the LR correction of the new token rows


@dataclass(frozen=True)
class ResumeSource:
    """The checkpoint a run continues from (``path`` None: a new run) and what it left behind."""

    path: Optional[Path]
    state: Optional[TrainingState]
    branch: Optional[Branch] = None  # later steps set aside by a resume from an older checkpoint


@dataclass(frozen=True)
class Session:
    """What ``FineTuneRecipe.setup`` decided: values, the same for the whole run (the objects training changes are
    :class:`MovingParts`; the recipe keeps the progress and the judges)."""

    training: TrainingConfig
    """``cfg.training`` as this run applies it: the planned accumulation, and ``max_steps`` cut by
    ``training.max_epochs`` (the schedule, the metrics' ETA and the checkpoint's training config use it);
    the config the recipe was given is never replaced."""
    runtime: Runtime
    data: TrainingData
    plan: BatchPlan
    sampler: ResumableBatchSampler  # the batches of every epoch, and the data position after each batch
    offloaded: tuple[str, ...]  # modules kept on the CPU (training.offload_frozen)
    train_hours: float  # hours of audio in the training clips (epochs and hours seen are logged)

    @property
    def max_steps(self) -> int:
        return self.training.max_steps

    @property
    def device(self) -> torch.device:
        return self.runtime.device

    @property
    def dist(self) -> DistContext:
        return self.runtime.dist


@dataclass(frozen=True)
class MovingParts:
    """The objects training changes in place: each step moves the weights, the optimizer's moments, the loss scale
    (and maybe the precision) and the metrics' interval; a save records how long it took. Frozen only in which
    objects they are (set up once); what is inside them is the state a checkpoint saves."""

    model: XttsTrainingModel
    ddp_model: torch.nn.Module  # the model, or its DistributedDataParallel wrapper under torchrun (forward)
    trainable: TrainableSetup  # training.trainable: all / freeze / lora (its kept rows are put back after each step)
    opt: Optimisation
    stability: StabilityController  # guard, snapshot, GradScaler and the precision policy in force
    metrics: MetricsLogger
    save_time: SaveTimeCheck


def build_runtime(cfg: Config, dist: DistContext) -> Runtime:
    device = dist.device
    cpu_plan = apply_cpu_plan(cfg.training.cpu_threads, cfg.training.num_workers, device.type)
    policy = resolve_precision(cfg.precision.mode, device)
    apply_tf32(cfg.precision.tf32, device)  # process-wide: set with the run's device, not at import
    return Runtime(dist=dist, device=device, cpu_plan=cpu_plan, policy=policy)


def build_model(cfg: Config, base: BaseModelFiles, vocab_path: Path, tokenizer: AmharicTokenizer,
                device: torch.device) -> XttsTrainingModel:
    """The training model (``build_training_model``) on the device, in train mode."""
    model = build_training_model(base, vocab_path, tokenizer)
    model.to(device)
    if cfg.training.gradient_checkpointing:
        enable_gradient_checkpointing(model.xtts.gpt)
    model.use_forward(cfg.training.gpt_forward, block_runner(cfg.training, model.xtts.gpt, device))
    model.train()
    return model


def block_runner(tcfg: TrainingConfig, gpt: torch.nn.Module, device: torch.device) -> Optional[CompiledBlocks]:
    """``training.compile``: the compiled blocks of the fast forward, or None (eager)."""
    if tcfg.gpt_forward != "fast" or not compile_enabled(tcfg.compile, device):
        log.info("training forward: %s, GPT blocks not compiled (training.compile: %s)", tcfg.gpt_forward,
                 tcfg.compile)
        return None
    runner = CompiledBlocks(longest_row(gpt))
    log.info("training forward: fast, GPT blocks compiled on first use (lengths rounded up to a multiple of %d: at "
             "most %d compiles)", runner.width, min(runner.buckets, MAX_SHAPES))
    return runner


def load_data(cfg: Config, train_csv: Path, eval_csv: Path, tokenizer: AmharicTokenizer, limits: Limits, *,
              model: XttsTrainingModel, runtime: Runtime,
              run_dir: Path, should_stop: Callable[[], bool], own_folder: bool = False) -> TrainingData:
    """Every clip checked up front; with ``training.cache_dvae_codes`` the DVAE codes of every clip on disk
    (``own_folder``: this machine's run folder is its own, so it builds its cache alongside rank 0)."""
    lang, show = cfg.run.language, runtime.is_main
    train_clips, train_report = load_clips(train_csv, tokenizer, lang, limits, progress=show)
    eval_clips, eval_report = load_clips(eval_csv, tokenizer, lang, limits, progress=show)
    for report in (train_report, eval_report):
        if show:
            (log.warning if report.rejected else log.info)("data: %s", report.summary())
    if not train_clips:
        raise DataError(f"{train_csv}: no usable training clip; {train_report.summary()}")
    if not eval_clips and show:
        log.warning("data: %s has no usable clip: eval losses are skipped", eval_csv)
    paths = None
    if cfg.training.cache_dvae_codes:
        cache_dir, clips = RunLayout(run_dir).codes_cache, train_clips + eval_clips

        def build() -> list[Path]:  # on a shared run dir the other ranks find every code cached
            return build_codes_cache(model, clips, cache_dir, runtime.device, progress=show, should_stop=should_stop)

        # rank 0 first; the others wait on MainFirst's long-timeout gloo group, not on the default (NCCL)
        # group, whose watchdog would abort them after COLLECTIVE_TIMEOUT on a large dataset or slow disk
        paths = MainFirst(runtime.dist, own_folder).run("the DVAE code cache", build)
    n = len(train_clips)
    def dataset(clips: list[Clip], train: bool, code_paths: Optional[list[Path]]) -> ClipDataset:
        return ClipDataset(clips, train=train, code_paths=code_paths, sample_rate=limits.sample_rate,
                           cond_min_s=cfg.training.min_conditioning_s, cond_max_s=cfg.training.max_conditioning_s,
                           seed=cfg.run.seed)

    return TrainingData(
        train_clips=train_clips, eval_clips=eval_clips,
        reports={"train": train_report.to_dict(), "eval": eval_report.to_dict()},
        train_set=dataset(train_clips, True, paths[:n] if paths else None),
        eval_set=dataset(eval_clips, False, paths[n:] if paths else None))


def find_resume_source(cfg: Config, run_dir: Path, handles: RunHandles) -> ResumeSource:
    """The checkpoint to continue from, loaded (the recipe's one checkpoint read). Rank 0 alone chooses and reads
    it; the other ranks get its state through the process group, so their machines need not see rank 0's disk."""
    dist, run = handles.dist, handles.run

    def read() -> tuple[Optional[Path], Optional[dict[str, object]]]:
        path = choose_checkpoint(cfg.checkpoint.resume, run_dir, run.owns)
        return path, CheckpointStore.load_state(path).to_dict() if path is not None else None

    path, saved = MainFirst(dist).share("the checkpoint to resume from", read)
    state = TrainingState.from_dict(saved, str(path)) if path is not None and saved is not None else None
    branch = None
    if state is not None and dist.is_main and cfg.checkpoint.resume not in ("auto", "never"):
        # resume from a named (older) checkpoint: this run's later steps are kept, never overwritten (branch.py)
        branch = set_aside_later_steps(run_dir, int(state.step), run.owns)
    return ResumeSource(path=path, state=state, branch=branch)


def plan_batches(tcfg: TrainingConfig, runtime: Runtime, model: XttsTrainingModel, data: TrainingData,
                 state: Optional[TrainingState], model_inputs: BatchInputs) -> BatchPlan:
    """The micro-batch size (``auto``: reused from the checkpoint, else probed) and the accumulation."""
    dist, world = runtime.dist, runtime.dist.world_size
    auto = tcfg.batch_size == "auto"
    saved = int(state.sampler.get("batch_size", -1)) if state is not None else -1
    if auto and saved > 0:  # the same batches as before the stop: exact resume
        size = saved
        log.info("batch_size auto: %d, as in the checkpoint (exact resume); start a new run dir to probe again", size)
    elif auto:
        def inputs_or_stop(batch: Batch, *, train: bool) -> ModelInputs:  # each try may take seconds on a GPU
            raise_if_stopped("the batch-size probe")
            return model_inputs(batch, train=train)

        choice = probe_batch_size(model, data.train_set, data.train_clips, inputs_or_stop, runtime.policy.autocast,
                                  runtime.device, rank=dist.rank, world_size=world, effective=tcfg.effective_batch_size)
        size = min(dist.all_gather_object(choice.size))  # every rank must fit
    else:
        size = int(tcfg.batch_size)
    size, accum = plan_accumulation(size, tcfg.effective_batch_size, world, tcfg.grad_accum_steps,
                                    lower_batch=auto and saved <= 0)
    if tcfg.effective_batch_size is not None:
        log.info("effective batch: %d x %d accumulation x %d process(es) = %d (training.effective_batch_size %d)",
                 size, accum, world, size * accum * world, tcfg.effective_batch_size)
    return BatchPlan(batch_size=size, grad_accum_steps=accum, world_size=world)


def build_optimisation(model: XttsTrainingModel, tcfg: TrainingConfig, device: torch.device,
                       base_vocab_size: int) -> Optimisation:
    optimizer = build_optimizer(model.gpt, tcfg, device)
    return Optimisation(optimizer=optimizer, trainable=[p for g in optimizer.param_groups for p in g["params"]],
                        new_rows=NewTokenRows(model.gpt, base_vocab_size, tcfg.new_token_lr_multiplier))


def sampler_key(runtime: Runtime, plan: BatchPlan, data: TrainingData, seed: int) -> SamplerKey:
    """What must not change for a saved data position to mean the same batches."""
    return {"world_size": runtime.dist.world_size, "batch_size": plan.batch_size, "num_clips": len(data.train_clips),
            "seed": seed}


def build_loader(cfg: Config, runtime: Runtime, data: TrainingData, plan: BatchPlan, position: tuple[int, int],
                 step: int) -> tuple[ResumableBatchSampler, torch.utils.data.DataLoader]:
    """(the resumable sampler at ``position``, the training loader; iterating it starts its workers)."""
    dist = runtime.dist
    sampler = ResumableBatchSampler([c.num_samples for c in data.train_clips], plan.batch_size, cfg.run.seed,
                                    rank=dist.rank, world_size=dist.world_size,
                                    bucketing=cfg.training.length_bucketing, start=position)
    loader = make_loader(data.train_set, sampler, num_workers=runtime.cpu_plan.workers,
                         pin_memory=runtime.device.type == "cuda",
                         base_seed=(cfg.run.seed * 1_000_003 + step * 101 + dist.rank) % 2**31)
    return sampler, loader


def preflight(model: XttsTrainingModel, optimizer: torch.optim.Optimizer, runtime: Runtime, data: TrainingData,
              plan: BatchPlan, offloaded: Sequence[str], base_vocab_size: int, stability: StabilityController,
              model_inputs: BatchInputs, kept: int = 0) -> None:
    """One real forward/backward on the clips most likely to fail, before hours of training. ``stability``: the
    run's loss scaler and precision policy; ``kept``: weights of trainable tensors that stay as they are (the base
    vocabulary's rows under training.trainable freeze/lora: ``TrainableSetup.kept``)."""
    scaler, policy = stability.scaler, stability.policy
    check_setup(model, optimizer, runtime.device, offloaded, kept=kept)
    model.expect_rows([len(c.tokens) for c in data.train_clips], [c.num_samples for c in data.train_clips])
    vocab_rows = model.gpt.text_embedding.weight.shape[0]
    picked = pick_check_clips([c.tokens for c in data.train_clips], base_vocab_size, vocab_rows, plan.batch_size)
    items = collate([data.train_set[ItemKey(i, 0, 0, slot, runtime.dist.rank)] for slot, i in enumerate(picked)])
    check_forward_backward(model, model_inputs(items, train=True), policy.autocast, base_vocab_size,
                           runtime.device, scaler=scaler)


def seed_or_restore_rng(rng_state: Optional[RngState], seed: int, rank: int, step: int, device: torch.device) -> None:
    """The checkpoint's random streams of this rank, or fresh ones from the seed (last in setup)."""
    if rng_state is not None:
        restore_rng(rng_state, device)
        return
    seed = seed + 7919 * rank + step
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def steps_for_epochs(tcfg: TrainingConfig, num_clips: int, samples_per_step: int) -> Optional[int]:
    """``training.max_epochs`` in optimizer steps when it ends the run before ``max_steps``, else None.

    A warm-up at least as long as that run is refused up front (the LR would never reach its peak)."""
    epochs = tcfg.max_epochs
    if epochs is None:
        return None
    steps = max(1, math.ceil(epochs * num_clips / samples_per_step))
    if steps >= tcfg.max_steps:
        log.info("training.max_epochs %g = %d steps: training.max_steps %d comes first", epochs, steps, tcfg.max_steps)
        return None
    if tcfg.warmup_steps >= steps:
        raise ConfigError(
            f"training.max_epochs: {epochs:g} epochs of {num_clips} clips at {samples_per_step} clips per step is "
            f"{steps} steps, not more than training.warmup_steps {tcfg.warmup_steps}; lower warmup_steps or raise "
            f"max_epochs")
    log.info("training.max_epochs %g: %d steps of %d clips (before training.max_steps %d)", epochs, steps,
             samples_per_step, tcfg.max_steps)
    return steps
