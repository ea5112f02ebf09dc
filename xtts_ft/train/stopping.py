"""What a stop needs besides noticing the signal: the exact resume command, and a step to go back to.

``resume_command`` turns the command line that started a run into the one that continues it: every
``--set``, ``--max-steps`` and other option stays; only what would start *another* run goes
(``--resume never`` or a checkpoint path, ``--archive-old-run``), with ``--resume auto`` added when the
config itself does not resume. Both the trainer's stop line and the command line's closing line
print it.

``StepStart`` remembers the data position and the random generators at the start of an optimizer
step, so a step abandoned between micro-batches leaves the run exactly at the end of the last
finished step: the checkpoint saved then resumes bit-identically.

``StopCoordinator`` is the training recipe's one contact with stop requests: the agreed stop across
ranks (a collective every rank makes at the same point), abandoning a step between micro-batches,
what the run was doing when it noticed the stop, and the closing line and event of a stopped run.
"""

from __future__ import annotations

import logging
import random
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

import numpy as np
import torch

from xtts_ft.json_types import JsonValue
from xtts_ft.stop_report import python_command, write_stop_event
from xtts_ft.stop_signals import StopSignals
from xtts_ft.train.distributed import DistContext

if TYPE_CHECKING:
    from xtts_ft.train.metrics import MetricsLogger

log = logging.getLogger(__name__)

_DROP_WITH_VALUE = ("--resume",)
_DROP_FLAGS = ("--archive-old-run",)


def resume_command(prefix: Sequence[str], argv: Sequence[str], config_resume: str,
                   checkpoint: Optional[Path] = None) -> str:
    """The command that continues the run ``prefix + argv`` started (see the module doc).

    ``config_resume`` is ``checkpoint.resume`` as the run resolved it (file and overrides together);
    ``checkpoint``: continue from this folder (a run started from a checkpoint outside its run folder
    that has saved none of its own yet), else from the latest in the run folder.
    """
    kept: list[str] = []
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        name = arg.split("=", 1)[0]
        if name in _DROP_FLAGS:
            i += 1
            continue
        if name in _DROP_WITH_VALUE:
            i += 1 if "=" in arg else 2
            continue
        if name == "--set":
            value = arg.split("=", 1)[1] if "=" in arg else (args[i + 1] if i + 1 < len(args) else "")
            step = 1 if "=" in arg else 2
            if value.replace(" ", "").startswith("checkpoint.resume="):
                i += step
                continue
            kept.extend(args[i:i + step])
            i += step
            continue
        kept.append(arg)
        i += 1
    if checkpoint is not None:
        kept += ["--resume", str(checkpoint)]
    elif config_resume != "auto":
        kept += ["--resume", "auto"]
    return shlex.join([*prefix, *kept])


CommandLine = tuple[list[str], list[str]]  # (prefix such as ["python", "headless_train.py"], the arguments)


def continue_command(command_line: Optional[CommandLine], config_resume: str, run_dir: Path,
                     last_checkpoint: Optional[Path]) -> str:
    """The resume command for a run stopped with ``last_checkpoint`` as its newest checkpoint.

    ``command_line``: how the run was started (None: this process's own ``sys.argv``).
    """
    if command_line is None:
        if not sys.argv or not sys.argv[0]:
            return "the same command with --resume auto"
        command_line = ([python_command(), sys.argv[0]], sys.argv[1:])
    outside = None
    if last_checkpoint is not None and Path(run_dir).resolve() not in Path(last_checkpoint).resolve().parents:
        outside = Path(last_checkpoint)
    return resume_command(*command_line, config_resume, checkpoint=outside)


@dataclass
class StepStart:
    """Data position and random generator states at the start of an optimizer step."""

    position: tuple[int, int]
    python: tuple[object, ...]  # random.getstate()
    numpy: dict[str, object]  # np.random.get_state(legacy=False)
    torch_cpu: torch.Tensor
    cuda: Optional[torch.Tensor]

    @classmethod
    def capture(cls, position: tuple[int, int], device: torch.device) -> StepStart:
        # the CUDA generator's state (seed, offset) lives on the host: reading it does not sync the device
        cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
        return cls(position, random.getstate(), np.random.get_state(legacy=False), torch.get_rng_state(), cuda)

    def restore(self, device: torch.device) -> tuple[int, int]:
        random.setstate(self.python)
        np.random.set_state(self.numpy)
        torch.set_rng_state(self.torch_cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state(self.cuda, device)
        return self.position


class StopCoordinator:
    """Stop requests as the training recipe sees them (``signals``: the command's StopSignals)."""

    def __init__(self, signals: StopSignals, dist: DistContext, *, command_line: Optional[CommandLine], config_resume: str,
                 run_dir: Path) -> None:
        self.signals, self.dist = signals, dist
        self.command_line, self.config_resume, self.run_dir = command_line, config_resume, Path(run_dir)
        self.where: Optional[str] = None  # what the run was doing when it noticed a stop request

    @property
    def requested(self) -> bool:
        """This process was asked to stop (not collective: for checks inside one rank's work)."""
        return self.signals.requested

    def agreed(self) -> bool:
        """Whether any process was asked to stop (a collective call: every rank makes it at the same point)."""
        return not self.dist.all_true(not self.signals.requested)

    def note(self, where: str) -> None:
        """Remember the first place a stop was noticed."""
        self.where = self.where or where

    def step_start(self, position: tuple[int, int], device: torch.device) -> Optional[StepStart]:
        """What an abandoned step goes back to; None under torchrun (every rank would have to agree to abandon)."""
        return None if self.dist.enabled else StepStart.capture(position, device)

    def abandon_step(self, start: Optional[StepStart], step: int, micro: int, accum: int,
                     device: torch.device) -> Optional[tuple[int, int]]:
        """Between micro-batches: with a stop requested, the data position the step started at, else None."""
        if start is None or not self.signals.requested:
            return None
        self.where = f"step {step + 1} (abandoned after {micro} of {accum} micro-batches)"
        return start.restore(device)

    def report(self, step: int, checkpoint: Optional[Path], saved_now: bool, metrics: Optional[MetricsLogger]) -> None:
        """The stop's console line with the resume command, and its event (events.jsonl) on rank 0."""
        if not self.dist.is_main:
            return
        where = self.where or f"step {step}"
        hint = continue_command(self.command_line, self.config_resume, self.run_dir, checkpoint)
        saved = (f"saved {checkpoint}" if checkpoint is not None and saved_now
                 else "nothing new to save" if step == 0 or saved_now
                 else f"the last checkpoint is {checkpoint}")
        log.warning("stopped by %s during %s; %s. Resume with: %s", self.signals.signal_name, where, saved, hint)
        event: dict[str, JsonValue] = {"signal": self.signals.signal_name, "during": where,
                                       "checkpoint": str(checkpoint) if checkpoint is not None else None,
                                       "resume_command": hint}
        if metrics is not None and metrics.enabled:
            metrics.event(step, "stop", **event)
        else:
            write_stop_event(self.run_dir, {"step": step, "event": "stop", **event})
