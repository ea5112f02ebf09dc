"""The run folder itself is locked (issue 51): a command-line trainer keeps every other trainer out, as real processes.

Seen before: with a trainer at step 240, ``rm RUN/trainer.lock`` and the same command again started a second
trainer beside the first (every metrics row twice, each one's retention deleting the other's checkpoints); a
torchrun beside a command-line trainer wrote its header, its process group line and "read 66 entries" into the
holder's train.log and was refused only after 28-42 s, once torch and coqui had loaded. (A folder moved or replaced
under its trainer: tests/test_run_lock.py.)

The holder is ``headless_train.py`` on the tiny model, paused (SIGSTOP) once it has saved, so that its files
stay as they are while a test looks at them.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from tests.fixtures.scripts import TIMED_HEADLESS, script_env, torchrun_command
from tests.reliability.relhelpers import REPO, small_config, wait_for
from xtts_ft.checkpoint_store import CheckpointStore
from xtts_ft.config import dump_config
from xtts_ft.layout import RunLayout

REFUSED = "another trainer is using this run folder"
ANSWER_S = 10.0  # a refused trainer answers within this, from its own start (issue 51)


@dataclass
class Holder:
    proc: subprocess.Popen
    run: Path
    args: list[str]  # headless_train.py's arguments: the same command again is a second trainer

    def files(self) -> dict[str, tuple[int, int]]:
        """Every file of the run folder with its size and modification time: what a refused trainer must not change."""
        return {p.relative_to(self.run).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns)
                for p in sorted(self.run.rglob("*")) if p.is_file()}

    def steps(self) -> list[int]:
        """The training steps metrics.jsonl holds, in file order (a line being written when paused is left out)."""
        lines = (self.run / "metrics.jsonl").read_text(encoding="utf-8").split("\n")[:-1]
        return [row["step"] for row in map(json.loads, lines) if row.get("split") != "eval" and "loss" in row]


@pytest.fixture(scope="module")
def holder(tiny_base_dir, dataset, tmp_path_factory) -> Iterator[Holder]:
    root = tmp_path_factory.mktemp("held")
    run = root / "run"
    cfg = small_config(run, training={"max_steps": 100000}, checkpoint={"every_steps": 2, "keep_last": 2},
                       evaluation={"recognize": False}, dataset={"path": str(dataset[0].parent), "short_clips": "off"},
                       base_model={"source": str(tiny_base_dir)})
    config = root / "held.yaml"
    dump_config(cfg, config)
    args = ["--config", str(config)]
    with (root / "holder.log").open("w") as log:
        proc = subprocess.Popen([sys.executable, "headless_train.py", *args], cwd=REPO, env=script_env(), stdout=log,
                                stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: CheckpointStore.of_run(run).latest() is not None, 300, "checkpoint", proc)
            proc.send_signal(signal.SIGSTOP)
            yield Holder(proc, run, args)
        finally:
            proc.kill()
            proc.wait()


def refusals(stderr: str, holder: Holder) -> list[str]:
    lines = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert lines and all(REFUSED in line and f"pid {holder.proc.pid}," in line for line in lines), stderr[-3000:]
    return lines


def test_torchrun_beside_a_command_line_trainer_is_refused_at_once_and_writes_nothing(holder, tmp_path):
    before, log = holder.files(), (holder.run / "train.log").read_bytes()
    out = tmp_path / "ranks"
    out.mkdir()
    proc = subprocess.run(torchrun_command(TIMED_HEADLESS, out, *holder.args), cwd=REPO, capture_output=True,
                          text=True, timeout=300, env=script_env(OMP_NUM_THREADS="1"))
    assert proc.returncode != 0
    refusals(proc.stderr, holder)
    ranks = [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]
    # rank 0 answers; rank 1 too, unless torchrun ended it first (it stops the other ranks once one has failed)
    assert (out / "rank0.json").is_file() and all(r["exit"] == 2 and r["seconds"] < ANSWER_S for r in ranks), ranks
    assert (holder.run / "train.log").read_bytes() == log  # not one line in the holder's log
    assert holder.files() == before


def test_a_deleted_lock_file_lets_no_second_trainer_in(holder):
    RunLayout(holder.run).lock_file.unlink()  # as a person or a cleanup script might, while it trains
    before, steps = holder.files(), holder.steps()
    started = time.monotonic()
    second = subprocess.run([sys.executable, "headless_train.py", *holder.args], cwd=REPO, env=script_env(),
                            capture_output=True, text=True, timeout=60)
    assert second.returncode == 2 and time.monotonic() - started < ANSWER_S, second.stderr[-3000:]
    assert len(refusals(second.stderr, holder)) == 1 and "Traceback" not in second.stderr
    assert holder.files() == before  # no lock file, log line or checkpoint of its own

    # the holder trains on, writes its line again before its next checkpoint, and stays the folder's one writer
    lock_file = RunLayout(holder.run).lock_file
    holder.proc.send_signal(signal.SIGCONT)
    try:
        wait_for(lambda: lock_file.exists() and f'"pid": {holder.proc.pid},' in lock_file.read_text(), 60,
                 "trainer.lock written again", holder.proc)
        wait_for(lambda: len(holder.steps()) > len(steps), 60, "a step after it", holder.proc)
    finally:
        holder.proc.send_signal(signal.SIGSTOP)
    after = holder.steps()
    assert after[:len(steps)] == steps and after == sorted(set(after))  # one writer: every step once, in order
    assert "was deleted while this trainer held the run folder; written again" in (holder.run / "train.log").read_text()

