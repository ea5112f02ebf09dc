"""``python -m xtts_ft launch``: where this machine stands, from flags, Lightning AI's or SLURM's variables, and the
torchrun command it prints and runs (tests/train/test_several_machines.py runs two machines with it)."""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys

import pytest
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

from xtts_ft import cli
from xtts_ft.commands import launch
from xtts_ft.commands.common import LAUNCH_ARGS_ENV
from xtts_ft.commands.launch import ErrorLines, Placement, first_slurm_host, placement, stderr_watched
from xtts_ft.errors import ConfigError
from xtts_ft.peers import Notice, PeerBoard


def flags(**given) -> argparse.Namespace:
    return argparse.Namespace(**{"nnodes": None, "node_rank": None, "master_addr": None, "master_port": None, **given})


LIGHTNING = {"NUM_NODES": "4", "NODE_RANK": "2", "MASTER_ADDR": "10.0.0.7", "MASTER_PORT": "6006",
             "WORLD_SIZE": "32"}  # WORLD_SIZE counts devices there: torchrun derives its own


def test_lightning_ai_variables_place_this_machine():
    where = placement(flags(), LIGHTNING)
    assert where == Placement(4, 2, "10.0.0.7", 6006, "NUM_NODES, NODE_RANK, MASTER_ADDR, MASTER_PORT")
    assert where.torchrun_options(8) == ["--nnodes=4", "--node-rank=2", "--master-addr=10.0.0.7",
                                         "--master-port=6006", "--nproc-per-node=8"]


def test_slurm_variables_place_this_machine_with_the_first_host_as_the_main_one():
    env = {"SLURM_NNODES": "3", "SLURM_NODEID": "1", "SLURM_JOB_NODELIST": "gpu[07-09,12],cpu1", "SLURM_LOCALID": "0"}
    assert placement(flags(), env) == Placement(3, 1, "gpu07", 29500, "SLURM_NNODES, SLURM_NODEID, SLURM_JOB_NODELIST")
    assert placement(flags(master_port=4000, node_rank=2), env).master_port == 4000  # flags win, one by one
    assert [first_slurm_host(x) for x in ("node5", "a[1-2]", "x-y[003]")] == ["node5", "a1", "x-y003"]


def test_nothing_set_is_one_machine_and_torchrun_standalone():
    where = placement(flags(), {})
    assert where == Placement(1, 0, None, 29500, "nothing set")
    assert where.torchrun_options(1) == ["--standalone", "--nproc-per-node=1"]


@pytest.mark.parametrize("given, env, says", [
    (flags(node_rank=2), {"NUM_NODES": "2", "MASTER_ADDR": "h"}, "this machine's rank between 0 and 1"),
    (flags(), {"NUM_NODES": "2", "NODE_RANK": "1"}, "set MASTER_ADDR"),
    (flags(), {"NUM_NODES": "two"}, "NUM_NODES='two': not a whole number"),
    (flags(), {"SLURM_NNODES": "2", "SLURM_LOCALID": "3"}, "srun --ntasks-per-node=1"),
])
def test_a_placement_that_cannot_work_is_one_line(given, env, says):
    with pytest.raises(ConfigError, match=says):
        placement(given, env)


def test_the_launch_options_stay_with_the_launcher_and_the_rest_goes_to_headless_train():
    argv = ["--config", "c.yaml", "--nnodes", "2", "--node-rank=1", "--set", "training.lr=1e-5", "--dry-run",
            "--master-port", "7", "--nproc-per-node=2", "--max-steps", "9"]
    assert launch.training_arguments(argv) == ["--config", "c.yaml", "--set", "training.lr=1e-5", "--max-steps", "9"]


def test_dry_run_prints_where_and_the_torchrun_command(monkeypatch, capsys):
    for name, value in LIGHTNING.items():
        monkeypatch.setenv(name, value)
    assert cli.main(["launch", "--config", "configs/demo.yaml", "--max-steps", "3", "--nproc-per-node", "2",
                     "--dry-run"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0] == ("launch: machine 2 of 4, main machine 10.0.0.7:6006, 2 process(es) here (from NUM_NODES, "
                      "NODE_RANK, MASTER_ADDR, MASTER_PORT)")
    assert err[1].startswith(f"launch: {sys.executable} -m torch.distributed.run --nnodes=4 --node-rank=2 "
                             f"--master-addr=10.0.0.7 --master-port=6006 --nproc-per-node=2 ")
    assert err[1].endswith("headless_train.py --config configs/demo.yaml --max-steps 3")


def test_a_worker_of_launch_offers_the_launch_command_to_resume(monkeypatch):
    seen = []
    monkeypatch.setattr(cli, "run_command", lambda command, args: seen.append(args.command_line) or 0)
    monkeypatch.setenv(LAUNCH_ARGS_ENV, json.dumps(["--config", "c.yaml", "--nnodes", "2"]))
    cli.headless_main(["--config", "c.yaml", "--max-steps", "5"])
    assert seen == [(["-m", "xtts_ft", "launch"], ["--config", "c.yaml", "--nnodes", "2"])]


def test_the_workers_error_lines_are_kept_as_they_pass_through_unchanged(capfd):
    errors = ErrorLines()
    worker = ("import sys; sys.stderr.write('02:00 INFO step 1\\rstep 2\\nerror: dataset.path: folder x'); "
              "sys.stderr.flush(); sys.stderr.write(' does not exist\\nerror: dataset.path: folder x does not exist\\n')")
    with stderr_watched(errors):
        subprocess.run([sys.executable, "-c", worker], check=True)  # inherits this process's stderr, as workers do
    assert errors.lines == ["error: dataset.path: folder x does not exist"]
    assert "02:00 INFO step 1\rstep 2\nerror: dataset.path: folder x does not exist\n" in capfd.readouterr().err


def test_a_machine_whose_worker_died_without_a_word_tells_the_other_machines(capsys):
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    failed = ChildFailedError("headless_train.py", {1: ProcessFailure(local_rank=0, pid=4242, exitcode=-9,
                                                                        error_file="")})
    zero = PeerBoard(store, 0, 2)
    zero.acknowledge()  # rank 0 reads it (its watch acknowledges what it reads)
    launch.tell_other_machines(Placement(2, 1, "127.0.0.1", store.port, "flags"), 1, failed)
    assert zero.notice() == Notice(1, "it ended with exit code -9 on machine 1 (its output there says why)")
    with socket.socket() as s:  # machine 0 (and the board with it) is gone: nothing to tell, one line says so
        s.bind(("127.0.0.1", 0))
        gone = s.getsockname()[1]
    launch.tell_other_machines(Placement(2, 1, "127.0.0.1", gone, "flags"), 1, failed)
    assert capsys.readouterr().err.startswith("launch: could not tell the other machines (")
