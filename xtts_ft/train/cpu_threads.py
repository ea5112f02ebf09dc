"""How many CPU threads torch uses and how many data-loader workers feed it, decided together.

On a small machine the two compete for the same cores: torch's default (one intra-op thread per
core) plus two loader workers on a 2-core machine that other programs also use ran the demo's
steps about 4x slower than one torch thread (measured, see the project's notes). So the trainer
counts the cores it may use (``sched_getaffinity``) and how busy they already are (the 1-minute
load average), gives the loader workers what they need first, and gives torch the rest, never
less than one thread. ``training.cpu_threads`` (a number) overrides the torch share; the choice
and its reason are logged at the start of training.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Optional, Union

import torch

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CpuPlan:
    threads: int  # torch intra-op threads of the training process
    workers: int  # data-loader worker processes
    reason: str

    def describe(self) -> str:
        return f"torch threads {self.threads}, data-loader workers {self.workers} ({self.reason})"


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def plan_cpu(cpu_threads: Union[int, str], num_workers: int, device_type: str, *, cores: Optional[int] = None,
             load: Optional[float] = None, ceiling: Optional[int] = None, env_threads: Optional[str] = None) -> CpuPlan:
    """The thread/worker split for ``cores`` usable cores with ``load`` of them already busy.

    ``ceiling`` is torch's current thread count: auto never raises it (a launcher, a test or
    ``OMP_NUM_THREADS`` that lowered it knew better); ``env_threads`` is ``OMP_NUM_THREADS``.
    """
    cores = usable_cores() if cores is None else cores
    if load is None:
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    # Training on the CPU needs a core of its own: more loader workers than cores - 1 only steal from it.
    workers = min(num_workers, max(0, cores - 1)) if device_type == "cpu" else num_workers
    capped = f"; training.num_workers {num_workers} capped at {workers} to leave torch a core" if workers < num_workers else ""
    if cpu_threads != "auto":
        return CpuPlan(int(cpu_threads), workers, f"training.cpu_threads{capped}")
    if env_threads and env_threads.isdigit() and int(env_threads) >= 1:
        return CpuPlan(int(env_threads), workers, f"OMP_NUM_THREADS{capped}")
    # The 1-minute average includes this process, busy since the run started: count only the others.
    idle = max(0.0, cores - max(0.0, load - 1.0))
    threads = max(1, min(cores - workers, round(idle), ceiling or cores))
    return CpuPlan(threads, workers, f"auto: {cores} cores, load {load:.1f}, {workers} for loading{capped}")


def apply_cpu_plan(cpu_threads: Union[int, str], num_workers: int, device_type: str) -> CpuPlan:
    """Decide, set torch's intra-op thread count, log the choice, and return it."""

    plan = plan_cpu(cpu_threads, num_workers, device_type, ceiling=torch.get_num_threads(),
                    env_threads=os.environ.get("OMP_NUM_THREADS"))
    torch.set_num_threads(plan.threads)
    log.info("CPU: %s", plan.describe())
    return plan
