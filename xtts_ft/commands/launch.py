"""``python -m xtts_ft launch``: ``headless_train.py`` under torchrun on this machine, as one machine of a job.

Run the same command on every machine of the job. Where this machine stands comes from, in this order:

- torchrun's own options given to ``launch`` (``--nnodes``, ``--node-rank``, ``--master-addr``,
  ``--master-port``);
- the variables Lightning AI's multi-machine jobs set on every machine (its multi-node pages list
  ``MASTER_ADDR``, ``MASTER_PORT``, ``NODE_RANK``, ``NUM_NODES`` and ``WORLD_SIZE``, the last counting
  devices, which torchrun derives itself); other schedulers that follow PyTorch's names set the same;
- SLURM's: ``SLURM_NNODES``, ``SLURM_NODEID`` and the first host of ``SLURM_JOB_NODELIST`` as the main
  machine (start one launcher per machine: ``srun --ntasks-per-node=1 ...``);
- nothing: one machine (torchrun ``--standalone``).

It uses every GPU of the machine (``--nproc-per-node`` to choose; one process on a machine without one),
prints the torchrun command and runs it, in this process (``torch.distributed.run``, the module behind the
``torchrun`` command): its agent starts and watches the workers and passes SIGINT/SIGTERM on to them, which
save and print how to resume (as this launch command).

A failed job ends with torchrun's ``ChildFailedError``; the launcher catches it and repeats the ``error:``
lines the workers printed (a user mistake on any machine reaches every rank: xtts_ft/peers.py), so the last
thing on the screen says what to fix, not a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import signal
import socket
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping, Optional, Sequence

import torch
from torch.distributed import DistError
from torch.distributed import run as torchrun
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

from xtts_ft.commands.common import LAUNCH_ARGS_ENV, command
from xtts_ft.errors import ConfigError
from xtts_ft.peers import PeerBoard

DEFAULT_PORT = 29500  # torchrun's
_MAX_REPEATED = 10  # error lines repeated at the end at most
#: What the launcher takes for itself; everything else goes to headless_train.py unchanged.
LAUNCH_OPTIONS = ("nnodes", "node_rank", "master_addr", "master_port", "nproc_per_node", "dry_run")


@dataclass(frozen=True)
class Placement:
    """This machine in the job: how many machines, which one this is, and where the main one listens."""

    nnodes: int
    node_rank: int
    master_addr: Optional[str]
    master_port: int
    source: str  # where the values came from, for the line printed before the command

    def torchrun_options(self, nproc: int) -> list[str]:
        if self.nnodes == 1:
            return ["--standalone", f"--nproc-per-node={nproc}"]
        return [f"--nnodes={self.nnodes}", f"--node-rank={self.node_rank}", f"--master-addr={self.master_addr}",
                f"--master-port={self.master_port}", f"--nproc-per-node={nproc}"]


def first_slurm_host(nodelist: str) -> str:
    """The first host of a SLURM node list: ``gpu[03-05,09],cpu1`` -> ``gpu03`` (what ``scontrol show hostnames``
    prints first)."""
    match = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if not match or not match.group(1):
        raise ConfigError(f"SLURM_JOB_NODELIST '{nodelist}': not a SLURM node list; give --master-addr HOST")
    prefix, ranges = match.group(1), match.group(2)
    if ranges is None:
        return prefix
    return prefix + ranges.split(",")[0].split("-")[0]


def _int(value: str, name: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"{name}={value!r}: not a whole number") from None


def placement(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> Placement:
    """Where this machine stands (see the module doc); a contradiction is a ConfigError naming the variable."""
    slurm = int(environ.get("SLURM_NNODES", environ.get("SLURM_JOB_NUM_NODES", "0")) or 0) > 0
    if slurm and int(environ.get("SLURM_LOCALID", "0") or 0) > 0:
        raise ConfigError("launch runs once per machine and starts every GPU's process itself: start it with "
                          "srun --ntasks-per-node=1 (this is task SLURM_LOCALID="
                          f"{environ['SLURM_LOCALID']} of its machine)")
    sources = []

    def pick(flag: Optional[object], option: str, names: Sequence[str]) -> Optional[str]:
        if flag is not None:
            sources.append(option)
            return str(flag)
        for name in names:
            if environ.get(name):
                sources.append(name)
                return environ[name]
        return None

    nnodes_text = pick(args.nnodes, "--nnodes", ["NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"])
    rank_text = pick(args.node_rank, "--node-rank", ["NODE_RANK", "SLURM_NODEID"])
    addr = pick(args.master_addr, "--master-addr", ["MASTER_ADDR"])
    if addr is None and environ.get("SLURM_JOB_NODELIST", environ.get("SLURM_NODELIST", "")):
        addr = first_slurm_host(environ.get("SLURM_JOB_NODELIST") or environ["SLURM_NODELIST"])
        sources.append("SLURM_JOB_NODELIST")
    port_text = pick(args.master_port, "--master-port", ["MASTER_PORT"])
    nnodes = _int(nnodes_text, "NUM_NODES") if nnodes_text is not None else 1
    node_rank = _int(rank_text, "NODE_RANK") if rank_text is not None else 0
    port = _int(port_text, "MASTER_PORT") if port_text is not None else DEFAULT_PORT
    if nnodes < 1 or not 0 <= node_rank < nnodes:
        raise ConfigError(f"machine {node_rank} of {nnodes} (from {', '.join(sources)}): the machine count must be 1 "
                          f"or more and this machine's rank between 0 and {max(nnodes - 1, 0)}")
    if nnodes > 1 and not addr:
        raise ConfigError(f"{nnodes} machines but no main machine's address: set MASTER_ADDR (or give --master-addr "
                          f"HOST), the same on every machine")
    return Placement(nnodes, node_rank, addr if nnodes > 1 else None, port, ", ".join(sources) or "nothing set")


def processes_per_machine(requested: Optional[int]) -> int:
    """``--nproc-per-node``, else every GPU torch sees here, else 1 (a CPU trains in one process)."""
    if requested is not None:
        if requested < 1:
            raise ConfigError(f"--nproc-per-node {requested}: must be 1 or more")
        return requested
    visible: int = torch.cuda.device_count()
    return max(1, visible)


def training_arguments(argv: Sequence[str]) -> list[str]:
    """The launch command line without the launcher's own options: what headless_train.py gets."""
    own = {"--" + name.replace("_", "-") for name in LAUNCH_OPTIONS}
    out, i = [], 0
    while i < len(argv):
        name = argv[i].split("=", 1)[0]
        if name in own:
            i += 1 if ("=" in argv[i] or name == "--dry-run") else 2
            continue
        out.append(argv[i])
        i += 1
    return out


def training_script() -> list[str]:
    """headless_train.py of this checkout; the same pipeline as a module where the package is installed alone."""
    script = Path(__file__).resolve().parents[2] / "headless_train.py"
    return [str(script)] if script.is_file() else ["-m", "xtts_ft", "train"]


def torchrun_arguments(where: Placement, nproc: int, arguments: Sequence[str]) -> list[str]:
    """torchrun's command line (without the program), as ``python -m torch.distributed.run`` takes it."""
    return [*where.torchrun_options(nproc), *training_script(), *arguments]


class ErrorLines:
    """Keeps the ``error:`` lines in what passes through (once each, in order)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._partial = b""

    def feed(self, chunk: bytes) -> None:
        *complete, self._partial = (self._partial + chunk).split(b"\n")
        for raw in complete:
            line = raw.decode("utf-8", errors="replace").split("\r")[-1].strip()
            if line.startswith("error: ") and line not in self.lines:
                self.lines.append(line)

    def close(self) -> None:
        self.feed(b"\n")


@contextlib.contextmanager
def stderr_watched(errors: ErrorLines) -> Iterator[None]:
    """This process's stderr (file descriptor 2, which torchrun's workers inherit) passed through a pipe, unchanged,
    while ``errors`` keeps its ``error:`` lines."""
    sys.stderr.flush()
    original = os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)

    def copy() -> None:
        while chunk := os.read(read_end, 65536):
            view = memoryview(chunk)
            while view:
                view = view[os.write(original, view):]
            errors.feed(chunk)

    thread = threading.Thread(target=copy, name="xtts-ft-launch-stderr", daemon=True)
    thread.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(original, 2)  # the pipe's last writer in this process; the workers have ended
        thread.join(timeout=5)
        os.close(read_end)
        os.close(original)
        errors.close()


def tell_other_machines(where: Placement, nproc: int, failed: ChildFailedError) -> None:
    """Post this machine's failed worker on the job's failure board (xtts_ft/peers.py), for a worker that ended
    without posting (killed, out of memory, a crash in C++): the other machines' ranks stop now, not when their
    next NCCL collective times out. A worker that posted its own line keeps it: the first post stands."""
    if where.nnodes < 2 or where.master_addr is None:
        return
    rank, failure = failed.get_first_failure()
    try:  # the board lives in machine 0's agent: when that is gone, there is no one left to tell
        socket.create_connection((where.master_addr, where.master_port), timeout=2).close()
        board = PeerBoard.connect(where.master_addr, where.master_port, rank, where.nnodes * nproc, timeout_s=5)
        board.post(f"it ended with exit code {failure.exitcode} on machine {where.node_rank} (its output there "
                   f"says why)")
        board.wait_for_acks(2.0)
    except (OSError, DistError) as exc:
        print(f"launch: could not tell the other machines ({exc})", file=sys.stderr)


def run_torchrun(where: Placement, nproc: int, arguments: Sequence[str]) -> tuple[int, list[str]]:
    """torchrun in this process (its agent: it starts the workers, watches them, forwards SIGINT/SIGTERM to them);
    (exit code, the ``error:`` lines the workers printed)."""
    errors = ErrorLines()
    code = 0
    with stderr_watched(errors):
        try:
            torchrun.run(torchrun.parse_args(list(arguments)))
        except ChildFailedError as failed:  # the workers' own lines say why
            code = 1
            tell_other_machines(where, nproc, failed)
        except SignalException as stop:  # the workers were asked to stop: they save and print how to resume
            print(f"launch: stopped by {signal.Signals(stop.sigval).name}", file=sys.stderr)
    return code, errors.lines


@command()
def launch(args: argparse.Namespace) -> int:
    where = placement(args)
    nproc = processes_per_machine(args.nproc_per_node)
    argv = list(args.command_line[1]) if getattr(args, "command_line", None) else []
    argv = argv[1:] if argv[:1] == ["launch"] else argv  # python -m xtts_ft launch ARGS: ARGS
    arguments = torchrun_arguments(where, nproc, training_arguments(argv))
    machines = (f"machine {where.node_rank} of {where.nnodes}, main machine {where.master_addr}:{where.master_port}"
                if where.nnodes > 1 else "one machine")
    print(f"launch: {machines}, {nproc} process(es) here (from {where.source})", file=sys.stderr)
    print(f"launch: {shlex.join([sys.executable, '-m', 'torch.distributed.run', *arguments])}", file=sys.stderr,
          flush=True)
    if args.dry_run:
        return 0
    # the workers print how to resume as this launch command (cli.py), and c10d's warnings about a store that
    # went away (machine 0's agent ends with its workers) stay out of the last lines a person reads
    os.environ[LAUNCH_ARGS_ENV] = json.dumps(argv)
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    code, errors = run_torchrun(where, nproc, arguments)
    if code != 0 and errors:
        print("", file=sys.stderr)
        for line in errors[:_MAX_REPEATED]:
            print(line, file=sys.stderr)
    return code
