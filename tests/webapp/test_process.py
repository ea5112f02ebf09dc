"""The run-process controller without a browser: detached start, re-attach, SIGTERM stop, resume.

A stand-in ``headless_train.py`` (written per test into a scratch folder used as the working
folder) behaves like the trainer where the controller looks: it logs steps to metrics.jsonl, and on
SIGTERM writes a ``stop`` event with its resume command, as ``train/loop.py`` does.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from xtts_ft.webapp.process import ProcessRecord, RunController, RunProcessError

FAKE_TRAINER = r'''
import json, signal, sys, time
from pathlib import Path
args = sys.argv[1:]
run = Path(next(a.split("=", 1)[1] for a in args if a.startswith("run.output_dir=")))
run.mkdir(parents=True, exist_ok=True)
start = 5 if "--resume" in args else 0
def stop(signum, frame):
    with open(run / "events.jsonl", "a") as f:
        f.write(json.dumps({"step": step, "event": "stop", "signal": "SIGTERM", "checkpoint": str(run / "ck"),
                            "resume_command": "python headless_train.py " + " ".join(args) + " --resume auto",
                            "time": time.time()}) + "\n")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
for step in range(start, start + 400):
    with open(run / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": step, "loss": 1.0}) + "\n")
    if "--resume" in args and step >= start + 2:
        (run / "summary.json").write_text("{}")
        break
    time.sleep(0.05)
'''


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "headless_train.py").write_text(FAKE_TRAINER)
    (tmp_path / "cfg.yaml").write_text("checkpoint:\n  resume: auto\n")
    return tmp_path


def wait_for(check, timeout: float = 15.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def test_start_is_detached_and_a_new_controller_reattaches(workdir: Path):
    run = workdir / "run"
    app = RunController(run, cwd=workdir)
    record = app.start(workdir / "cfg.yaml", ["training.max_steps=3"])
    try:
        assert record.command[1] == "headless_train.py" and "training.max_steps=3" in record.command
        assert os.getsid(record.pid) != os.getsid(0)  # its own session: the app's end does not reach it
        wait_for(lambda: (run / "metrics.jsonl").is_file())
        # a restarted app knows only the run folder: a fresh controller finds the same process
        again = RunController(run, cwd=workdir)
        state = again.state()
        assert state.running and state.pid == record.pid and state.phase == "running"
        with pytest.raises(RunProcessError, match="already going"):
            again.start(workdir / "cfg.yaml")
        assert again.stop() == record.pid
        wait_for(lambda: not again.state().running)
        state = again.state()
        assert state.phase == "stopped" and "SIGTERM" in state.detail
        assert state.resume_command.endswith("--resume auto")
    finally:
        if app.state().running:
            os.kill(record.pid, signal.SIGKILL)
    app.state()  # reaps the child


def test_resume_runs_the_printed_command_to_the_end(workdir: Path):
    run = workdir / "run"
    app = RunController(run, cwd=workdir)
    first = app.start(workdir / "cfg.yaml")
    wait_for(lambda: (run / "metrics.jsonl").is_file())
    app.stop()
    wait_for(lambda: app.state().phase == "stopped")
    second = app.resume()
    assert second.pid != first.pid and second.command[0] == sys.executable and "--resume" in second.command
    assert second.action == "resume"
    wait_for(lambda: app.state().phase == "finished")
    assert "=== " in app.log_tail() and "resume:" in app.log_tail()


def test_a_reused_pid_is_not_taken_for_the_run(workdir: Path):
    run = workdir / "run"
    run.mkdir()
    # this very test process, but with another start time: what a reused pid looks like
    record = ProcessRecord(os.getpid(), 1.0, [sys.executable, "headless_train.py"], str(workdir), time.time(), "start")
    (run / "app_process.json").write_text(json.dumps(record.__dict__))
    state = RunController(run, cwd=workdir).state()
    assert not state.running and state.phase == "exited"
    with pytest.raises(RunProcessError, match="no training process"):
        RunController(run, cwd=workdir).stop()


def test_nothing_to_resume_or_stop_in_a_new_folder(workdir: Path):
    app = RunController(workdir / "empty", cwd=workdir)
    assert app.state().phase == "not started"
    with pytest.raises(RunProcessError, match="nothing to resume"):
        app.resume()
