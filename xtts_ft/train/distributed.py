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
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn

from xtts_ft.errors import ConfigError

log = logging.getLogger(__name__)

COLLECTIVE_TIMEOUT = datetime.timedelta(minutes=60)  # rank 0 may synthesise eval samples meanwhile


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

    def broadcast_object(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank."""
        if not self.enabled:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def all_gather_object(self, obj: Any) -> list:
        if not self.enabled:
            return [obj]
        out: list = [None] * self.world_size
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
    from torch.nn.parallel import DistributedDataParallel as DDP

    return DDP(
        model,
        device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None,
        broadcast_buffers=False,  # the frozen buffers (mel filters, stats) are identical on every rank
    )


def cleanup_distributed(ctx: DistContext) -> None:
    if ctx.initialized_here and dist.is_initialized():
        dist.destroy_process_group()
