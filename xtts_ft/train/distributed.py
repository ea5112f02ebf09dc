"""Multi-GPU and multi-node training through torch.distributed (launch with ``torchrun``).

When ``WORLD_SIZE`` > 1 (set by torchrun, with ``RANK`` and ``LOCAL_RANK``), :func:`setup_distributed`
initialises the process group (NCCL on GPUs, gloo on CPU) and the GPT is wrapped in
``DistributedDataParallel``. The loop calls the *wrapper* for the forward pass, so gradients are
all-reduced in backward (coqui's Trainer unwraps ``.module`` right after wrapping, so its ranks
very likely train separate copies). The batch sampler shards the data per rank; only rank 0
writes files and logs; every rank resumes from the checkpoint rank 0 chose; saves are bracketed
by collectives so no rank runs ahead of a failed save.

Multi-node: put the run dir on storage every node sees (checkpoints are written by rank 0 and read
by every rank on resume; the DVAE code cache is computed by rank 0 and reused by the others, or
recomputed locally where it is missing).
"""

from __future__ import annotations

import datetime
import logging
import os
from dataclasses import dataclass
from typing import Callable, Optional, TypeVar, cast

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

from xtts_ft.errors import ConfigError, UserError

log = logging.getLogger(__name__)

COLLECTIVE_TIMEOUT = datetime.timedelta(minutes=60)  # rank 0 may synthesise eval samples meanwhile
# How long the other ranks wait for rank 0's file-writing stages (a first prepare of many hours of audio
# can take longer than a training collective may); a CPU (gloo) group, so no GPU watchdog is involved.
STAGE_TIMEOUT = datetime.timedelta(hours=12)
T = TypeVar("T")


class StageFailedOnMain(UserError):
    """Rank 0 failed in a stage the other ranks were waiting for; its own error says why."""


@dataclass(frozen=True)
class DistContext:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    initialized_here: bool

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()

    def all_reduce_sum(self, tensor: torch.Tensor) -> None:
        if self.enabled:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)

    def all_true(self, flag: bool) -> bool:
        """True only if ``flag`` is True on every rank."""
        if not self.enabled:
            return flag
        t = torch.tensor([1.0 if flag else 0.0], device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        return bool(t.item() > 0)

    def broadcast_object(self, obj: T) -> T:
        """Rank 0's ``obj`` on every rank."""
        if not self.enabled:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def all_gather_object(self, obj: T) -> list[T]:
        if not self.enabled:
            return [obj]
        out: list[T] = [obj] * self.world_size  # every slot is replaced by that rank's object
        dist.all_gather_object(out, obj)
        return out


def pick_device(preference: str, local_rank: int) -> torch.device:
    if preference == "cpu":
        return torch.device("cpu")
    if torch.cuda.is_available():
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    if preference == "cuda":
        raise ConfigError("run.device: cuda was requested but torch sees no GPU; set run.device: auto or cpu")
    return torch.device("cpu")


def setup_distributed(device_preference: str) -> DistContext:
    """Read torchrun's environment; initialise the process group when there is more than one process."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = pick_device(device_preference, local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    initialized_here = False
    if world_size > 1 and not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        kwargs = {"device_id": device} if device.type == "cuda" else {}
        dist.init_process_group(backend=backend, timeout=COLLECTIVE_TIMEOUT, **kwargs)
        initialized_here = True
        log.info("process group: %s, rank %d of %d, device %s", backend, rank, world_size, device)
    return DistContext(rank, world_size, local_rank, device, initialized_here)


def wrap_model(model: nn.Module, ctx: DistContext) -> nn.Module:
    """DDP around the whole training model (only its GPT has trainable parameters); identity when single-process."""
    if not ctx.enabled:
        return model

    return DDP(
        model,
        device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None,
        broadcast_buffers=False,  # the frozen buffers (mel filters, stats) are identical on every rank
    )


class MainFirst:
    """Stages that write files run on rank 0 while the other ranks wait, then on the others.

    The pipeline's stages are idempotent: each records a hash of its inputs and is skipped when its
    outputs are current. So ``run(what, fn)`` runs ``fn`` on rank 0 alone; then, on a run dir every
    node sees, the other ranks call ``fn`` too and it only reads what rank 0 wrote. On storage a node
    does not share, ``fn`` finds nothing current and runs there: first on that node's local rank 0, then
    on its other ranks, so no two processes of one node write the same files at once. A failure on
    rank 0 is sent to the others, which stop with :class:`StageFailedOnMain` instead of waiting.
    The training loop's DVAE code cache is built the same way (a first build can outlast
    ``COLLECTIVE_TIMEOUT``; the waits here use the gloo group's ``STAGE_TIMEOUT``).
    """

    def __init__(self, ctx: DistContext) -> None:
        self.ctx = ctx
        self._group = None

    def _group_once(self) -> dist.ProcessGroup:
        if self._group is None:  # created on first use; every rank reaches it in the same order
            self._group = dist.new_group(backend="gloo", timeout=STAGE_TIMEOUT)
        return self._group

    def _from_main(self, outcome: Optional[str]) -> str:
        box = [outcome]
        dist.broadcast_object_list(box, src=0, group=self._group_once())
        return box[0] or ""

    def _gather(self, outcome: str) -> list[str]:
        out: list[str] = [outcome] * self.ctx.world_size  # every slot is replaced by that rank's outcome
        dist.all_gather_object(out, outcome, group=self._group_once())
        return out

    def run(self, what: str, fn: Callable[[], T]) -> T:
        if not self.ctx.enabled:
            return fn()
        result: Optional[T] = None
        if self.ctx.is_main:
            try:
                result = fn()
            except BaseException as exc:  # noqa: BLE001 - re-raised; the others must not wait for it
                self._from_main(f"{type(exc).__name__}: {exc}".splitlines()[0])
                raise
            self._from_main("")
            self._gather("")  # the other nodes' local rank 0 run it meanwhile (a no-op on shared storage)
            return result
        failed = self._from_main(None)
        if failed:
            raise StageFailedOnMain(f"{what}: rank 0 failed ({failed}); rank {self.ctx.rank} stopped too")
        first = self.ctx.local_rank == 0
        error = ""
        try:
            if first:
                result = fn()
        except BaseException as exc:  # noqa: BLE001 - shared with the waiting ranks, then re-raised
            error = f"{type(exc).__name__}: {exc}".splitlines()[0]
            self._gather(error)
            raise
        errors = [e for e in self._gather(error) if e]
        if errors:
            raise StageFailedOnMain(f"{what}: another rank failed ({errors[0]}); rank {self.ctx.rank} stopped too")
        return cast(T, result) if first else fn()  # first: fn() returned it above


def cleanup_distributed(ctx: DistContext) -> None:
    if ctx.initialized_here and dist.is_initialized():
        dist.destroy_process_group()
