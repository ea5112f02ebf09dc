"""Chaos: a training process SIGKILLed again and again, resumed each time, ends where an uninterrupted run ends.

A tiny-model run of STEPS optimizer steps, saving every EVERY steps, is started in its own process
(scripts/chaos_train.py) and killed with SIGKILL once per entry of KILLS, each time resumed with
the same command (``checkpoint.resume: auto``). The processes are forked from one that imported the
training stack once (tests/fixtures/fork_server.py): each is a process of its own, killed for real,
without paying torch's and coqui's import every time. The moments come from a seeded generator:

- ``startup``: a random delay after launch, before or during model loading and setup;
- ``random``: once the process has finished a random number of new steps, after a further random
  delay (so the kill falls anywhere in a step, an evaluation or a checkpoint save);
- ``state``: while ``training_state.pt`` is half written into the staging folder (the script pauses
  there and says so through a marker file; a kill at that moment is what a power cut mid-save does);
- ``prune``: after a new checkpoint folder is in place, before older ones are pruned.

After every kill: every checkpoint folder on disk verifies, the newest one never goes backwards,
and no finished step is lost beyond one save interval. At the end: the step count is STEPS, every
checkpoint loads with ``weights_only=True``, nothing half-written is left, and the final GPT
weights are bit-identical to those of an uninterrupted run (CPU, ``num_workers=0``).
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.fixtures.fork_server import ForkedProcess
from tests.fixtures.scripts import CHAOS_TRAIN
from tests.reliability.relhelpers import copy_run
from xtts_ft import checkpoint_store as ckpt
from xtts_ft.checkpoint_store import CheckpointStore, RetentionPolicy
from xtts_ft.layout import META_FILE, STATE_FILE, step_dir_name, step_of

pytestmark = pytest.mark.slow  # a training process killed and resumed five times

# A round ends at its kill: at most a few steps past its newest save (startup: before its first step; random: 1-4
# steps and 0.2 s; state, prune: its first save), so five rounds stay far below STEPS even on a fast machine.
STEPS = 40
EVERY = 2
SEED = 20240611
# Each kind of moment once, the mid-save kill twice (the second after a resume from the first, whose staging
# folder the next run must clean up); each round is a process start (~5 s), so the random kills are not repeated.
KILLS = ["startup", "random", "state", "prune", "state"]
# One thread per process: with several processes on a small machine, torch's default (all cores each)
# makes a step 20x slower. Both runs use the same setting, so their numbers stay comparable bit for bit.
THREADS = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
SECTIONS = {"training": {"max_steps": STEPS, "num_workers": 0}, "checkpoint": {"every_steps": EVERY, "keep_last": 2}}


def steps_logged(run: Path) -> list[int]:
    """Steps in metrics.jsonl; read while the run writes it, so only complete lines count."""
    path = run / "metrics.jsonl"
    if not path.exists():
        return []
    complete = path.read_text(encoding="utf-8").split("\n")[:-1]
    return [r["step"] for r in map(json.loads, complete) if r.get("split") != "eval"]


def latest_step(run: Path) -> int:
    path = CheckpointStore.of_run(run).latest()
    return int(path.name.split("_")[1]) if path else 0


def wait_until(condition, proc: ForkedProcess, log: Path, timeout: float = 120.0) -> None:
    deadline = time.time() + timeout
    while not condition():
        assert proc.poll() is None, f"training exited early ({proc.returncode}):\n{log.read_text()[-3000:]}"
        assert time.time() < deadline, f"timed out waiting:\n{log.read_text()[-3000:]}"
        time.sleep(0.05)


def kill(proc: ForkedProcess) -> None:
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL


def staging_state_files(run: Path) -> list[Path]:
    return list((run / "checkpoints").glob(".step_*.new-*/training_state.pt.*.part"))


def test_sigkill_at_random_moments_and_mid_save_loses_nothing(training_forks, script_args, tmp_path):
    rng = random.Random(SEED)
    ref_run, run = tmp_path / "reference", tmp_path / "chaos"
    ref_args = script_args(ref_run, sections=SECTIONS)
    args = script_args(run, sections=SECTIONS)
    # runs alongside; same thread count, same numbers
    reference = training_forks.start(CHAOS_TRAIN, ref_args, log=tmp_path / "reference.log", **THREADS)
    log = tmp_path / "chaos.log"
    newest, mid_save_kills, trace = 0, 0, []
    try:
        for round_no, how in enumerate(KILLS):
            before = len(steps_logged(run))
            ready = tmp_path / f"ready_{round_no}"
            env = {"CHAOS_PAUSE": how, "CHAOS_READY": str(ready)} if how in ("state", "prune") else {}
            proc = training_forks.start(CHAOS_TRAIN, args, log=log, **THREADS, **env)
            try:
                if how == "startup":  # a random delay, cut short by the first step of this launch
                    deadline = time.time() + rng.uniform(0.3, 3.0)
                    while time.time() < deadline and len(steps_logged(run)) == before and proc.poll() is None:
                        time.sleep(0.02)
                elif how == "random":
                    target = rng.randint(1, 4)
                    wait_until(lambda before=before, target=target: len(steps_logged(run)) - before >= target, proc, log)
                    time.sleep(rng.uniform(0.0, 0.2))
                else:
                    wait_until(ready.exists, proc, log)
                    if how == "state":
                        assert staging_state_files(run), "paused, but no half-written training_state.pt in staging"
                        mid_save_kills += 1
                assert proc.poll() is None, f"round {round_no} ({how}): the run finished before the kill"
            finally:
                kill(proc)
            # what a user finds on disk after the kill
            for c in CheckpointStore.of_run(run).list():
                CheckpointStore.verify(c.folder)  # raises CheckpointError naming the file if damaged
            latest = latest_step(run)
            done = max(steps_logged(run), default=0)
            trace.append(f"{how}: {done} steps done, newest checkpoint {latest}")
            assert latest >= newest, f"round {round_no} ({how}): newest checkpoint went back from {newest} to {latest}"
            assert done - latest <= EVERY, f"round {round_no} ({how}): {done} steps done but the newest save is {latest}"
            if how == "state":
                writing = step_of(staging_state_files(run)[0].parent.name[1:].split(".")[0])
                assert writing > latest and not (run / "checkpoints" / step_dir_name(writing)).exists()
            newest = latest
        assert mid_save_kills == 2 and newest < STEPS, trace

        final_log = tmp_path / "final.log"
        final = training_forks.start(CHAOS_TRAIN, args, log=final_log, **THREADS)
        assert final.wait(timeout=300) == 0, final_log.read_text()[-3000:]
        assert f"RESULT step={STEPS} stopped_by_signal=False" in final_log.read_text()
        assert reference.wait(timeout=300) == 0, (tmp_path / "reference.log").read_text()[-3000:]
    finally:
        if reference.poll() is None:
            reference.kill()
            reference.wait()

    assert max(steps_logged(run)) == STEPS and set(steps_logged(run)) == set(range(1, STEPS + 1))
    entries = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert not [name for name in entries if name.startswith(".")], entries  # staging folders cleaned up
    folders = [(c.step, c.folder) for c in CheckpointStore.of_run(run).list()]
    assert folders[-1][0] == STEPS and len(entries) == len(folders)
    for step, folder in folders:
        state = CheckpointStore.load_state(folder)  # checksum verified, then torch.load(weights_only=True)
        assert state.step == step == CheckpointStore.verify(folder).step
        torch.load(folder / STATE_FILE, map_location="cpu", weights_only=True)
    ours = CheckpointStore.load_state(folders[-1][1]).gpt
    theirs = CheckpointStore.load_state(ref_run / "checkpoints" / step_dir_name(STEPS)).gpt
    assert set(ours) == set(theirs)
    different = [key for key in ours if not torch.equal(ours[key], theirs[key])]
    assert not different, f"after {len(KILLS)} kills ({trace}) the weights differ from an uninterrupted run: {different[:5]}"


class Killed(BaseException):
    """Stands for SIGKILL inside the process: nothing after it runs."""


def test_a_kill_while_pruning_leaves_no_half_deleted_checkpoint(trained_run, tmp_path, monkeypatch):
    """Found by the chaos test: a kill inside retention's rmtree left a step_ folder without its meta.json."""
    run = copy_run(trained_run, tmp_path / "run")

    def dies_half_way(path, ignore_errors=False):
        path = Path(path)
        if path.exists():
            (path / META_FILE).unlink()  # the delete got as far as one file
            raise Killed

    monkeypatch.setattr(ckpt.shutil, "rmtree", dies_half_way)
    with pytest.raises(Killed):
        CheckpointStore.of_run(run).apply_retention(RetentionPolicy(keep_last=1, keep_best=False))  # removes step 2
    monkeypatch.undo()
    names = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert [n for n in names if n.startswith("step_")] == ["step_000004"], names
    trash = next((run / "checkpoints").glob(".step_000002.trash-*"))
    dead = subprocess.Popen([sys.executable, "-c", ""])  # the killed writer: a pid that no longer runs
    dead.wait()
    trash.rename(trash.with_name(trash.name.rsplit("-", 1)[0] + f"-{dead.pid}"))
    CheckpointStore.of_run(run).clean_staging()  # what the next run does first
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_000004"]
