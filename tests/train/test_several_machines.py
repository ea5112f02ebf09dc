"""Two "machines" on this host: two ``python -m xtts_ft launch`` agents, each with its own run folder, as the
node-local disks of cloud machines are (one gloo process each, the variables Lightning AI's jobs set).

- The uninterrupted run (the module's one reference): both machines train; each prepared its own data and
  vocabulary in its own folder; rank 0 alone saved checkpoints.
- A resume on a new pair of machines: machine 0 keeps its run folder as the reference left it at step 2 (its
  step-4 checkpoint never reached the disk, as when a machine is preempted during that save), machine 1 is
  new (an empty disk). The run continues at step 2 and trains steps 3-4 with the reference's very losses:
  machine 1 never read a checkpoint, rank 0 sent it the state through the process group.
- A single-machine trainer holds machine 1's folder: each machine prints one ``error:`` line and both end
  within a minute; the launcher's repeated line, not torchrun's traceback, is the last thing printed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fixtures.scripts import REPO_ROOT, script_env
from xtts_ft.layout import METRICS_FILE, RunLayout

pytestmark = pytest.mark.slow  # two agents (launcher, torchrun, worker each) per run

STEPS = 4
CLIPS_PER_SPEAKER = 8  # of the demo dataset's 22: every machine prepares its own copy
# the demo on the tiny model, made short: no code cache, no recogniser, no samples, a checkpoint every 2 steps
SHORT = ["--config", "configs/demo.yaml", "--max-steps", str(STEPS), "--set", "evaluation.every_steps=0",
         "--set", "evaluation.sentences=[]", "--set", "evaluation.mcd_clips=0", "--set", "evaluation.eval_at_start=false",
         "--set", "evaluation.cer_floor_clips=0", "--set", "evaluation.recognize=false", "--set", "dataset.short_clips=off",
         "--set", "training.warmup_steps=0", "--set", "training.log_every=1", "--set", "checkpoint.every_steps=2",
         "--set", "training.num_workers=0", "--set", "training.cache_dvae_codes=false", "--set", "dataset.num_workers=1"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Machine:
    run_dir: Path
    code: int
    stderr: str
    ended: float  # time.monotonic() when its launcher ended

    def last_line(self) -> str:
        return [line for line in self.stderr.splitlines() if line.strip()][-1]


@dataclass(frozen=True)
class Inputs:
    base_dir: Path  # the tiny model
    dataset: Path  # a part of the demo dataset, the same for every machine (each reads it at this path)


def launch_two(run_dirs: list[Path], inputs: Inputs, timeout: float = 400) -> list[Machine]:
    """Both machines' launchers, started together with Lightning-style variables; each writes to its own folder."""
    port, procs = free_port(), []
    for rank, run_dir in enumerate(run_dirs):
        env = script_env(OMP_NUM_THREADS="1", NUM_NODES="2", NODE_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                         MASTER_PORT=str(port), WORLD_SIZE="2")
        cmd = [sys.executable, "-m", "xtts_ft", "launch", *SHORT, "--set", f"run.output_dir={run_dir}",
               "--set", f"base_model.source={inputs.base_dir}", "--set", f"dataset.path={inputs.dataset}"]
        procs.append(subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                      text=True, start_new_session=True))
    machines: list[Machine] = [Machine(run_dir, -1, "", 0.0) for run_dir in run_dirs]

    def wait(i: int) -> None:  # each in its own thread: when each machine ended is part of what is tested
        _out, machines[i].stderr = procs[i].communicate(timeout=timeout)
        machines[i].code, machines[i].ended = procs[i].returncode, time.monotonic()

    waiting = [threading.Thread(target=wait, args=(i,)) for i in range(len(procs))]
    try:
        for thread in waiting:
            thread.start()
        for thread in waiting:
            thread.join(timeout + 10)
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    return machines


def losses(run_dir: Path) -> dict[int, float]:
    """The last logged loss of each step (a resumed run logs its steps again after the ones it drops)."""
    rows = [json.loads(line) for line in (run_dir / METRICS_FILE).read_text().splitlines() if line.strip()]
    return {row["step"]: row["loss"] for row in rows if "loss" in row}


def checkpoints(run_dir: Path) -> list[str]:
    folder = run_dir / "checkpoints"
    return sorted(p.name for p in folder.iterdir() if (p / "meta.json").is_file()) if folder.is_dir() else []


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, tiny_base_dir) -> Inputs:
    demo, part = REPO_ROOT / "datasets" / "amharic_demo", tmp_path_factory.mktemp("dataset")
    header, *rows = (demo / "metadata.csv").read_text(encoding="utf-8").splitlines()
    kept = [row for row in rows if int(row.split("|")[0].rsplit("_", 1)[1].split(".")[0]) <= CLIPS_PER_SPEAKER]
    (part / "wavs").mkdir()
    for row in kept:
        shutil.copy(demo / row.split("|")[0], part / row.split("|")[0])
    (part / "metadata.csv").write_text("\n".join([header, *kept]) + "\n", encoding="utf-8")
    return Inputs(tiny_base_dir, part)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, inputs) -> list[Machine]:
    root = tmp_path_factory.mktemp("two_machines")
    return launch_two([root / "machine0" / "run", root / "machine1" / "run"], inputs)


def test_launch_reads_lightning_variables_and_both_machines_train_in_their_own_folders(reference):
    for rank, machine in enumerate(reference):
        assert machine.code == 0, machine.stderr[-3000:]
        assert f"launch: machine {rank} of 2, main machine 127.0.0.1:" in machine.stderr
        assert "from NUM_NODES, NODE_RANK, MASTER_ADDR, MASTER_PORT" in machine.stderr
        assert f"--nnodes=2 --node-rank={rank} --master-addr=127.0.0.1" in machine.stderr
        assert f"process group: gloo, rank {rank} of 2" in machine.stderr
        # each machine prepared its own data and vocabulary (nothing was shared between the folders)
        assert (machine.run_dir / "data" / "metadata_train.csv").is_file()
        assert (machine.run_dir / "tokenizer" / "vocab.json").is_file()
    assert "rank(s) 1 do not see rank 0's" in reference[0].stderr  # said, not found out at the first resume
    assert checkpoints(reference[0].run_dir) == ["step_000002", "step_000004"]
    assert checkpoints(reference[1].run_dir) == []  # rank 0 alone writes them
    assert sorted(losses(reference[0].run_dir)) == [1, 2, 3, 4]
    closing = [[line for line in m.stderr.splitlines() if line.endswith(" done.")] for m in reference]
    assert [len(lines) for lines in closing] == [1, 0]  # the closing summary names rank 0's files: rank 0's alone


def test_a_resume_on_node_local_folders_continues_at_the_saved_step_with_the_same_losses(reference, tmp_path, inputs):
    assert [m.code for m in reference] == [0, 0]
    machine0, machine1 = tmp_path / "machine0" / "run", tmp_path / "new_machine1" / "run"
    shutil.copytree(reference[0].run_dir, machine0)
    shutil.rmtree(machine0 / "checkpoints" / "step_000004")  # preempted while step 4 was being saved
    resumed = launch_two([machine0, machine1], inputs)
    for machine in resumed:
        assert machine.code == 0, machine.stderr[-3000:]
    assert "resuming from" in resumed[1].stderr and "at step 2" in resumed[1].stderr
    assert "steps 2 -> 4" in resumed[0].stderr
    assert checkpoints(machine1) == [] and not RunLayout(machine1).run_file.exists()  # it read none, wrote none
    before, after = losses(reference[0].run_dir), losses(machine0)
    assert [after[3], after[4]] == [before[3], before[4]]  # the same steps as the uninterrupted run, bit for bit
    assert checkpoints(machine0) == ["step_000002", "step_000004"]


def test_a_folder_held_on_one_machine_stops_both_machines_in_one_line(tmp_path, inputs):
    machine0, machine1 = tmp_path / "machine0" / "run", tmp_path / "machine1" / "run"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from xtts_ft.run_lock import RunLock; "
                               "RunLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(600)",
                               str(machine1)], cwd=REPO_ROOT, env=script_env(), stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        refused = launch_two([machine0, machine1], inputs)
    finally:
        holder.kill()
        holder.wait()
    assert [m.code for m in refused] != [0, 0]
    own = f"error: {machine1}: another trainer is using this run folder (pid {holder.pid}"
    assert refused[1].last_line().startswith(own), refused[1].stderr[-3000:]
    # rank 1 is refused as the command line locks (before torch loads): rank 0 stops with its line
    assert refused[0].last_line().startswith(f"error: stopped: rank 1 failed: {own[7:]}"), refused[0].stderr[-3000:]
    for machine in refused:
        errors = [line for line in machine.stderr.splitlines() if line.startswith("error: ")]
        assert len(set(errors)) == 1, errors  # one line per machine (the launcher repeats it last)
        assert "Connection closed by peer" not in machine.stderr and "DistBackendError" not in machine.stderr
    assert abs(refused[0].ended - refused[1].ended) < 60
    assert sorted(p.name for p in machine1.iterdir()) == ["trainer.lock"]  # nothing written into the held folder
