"""The run-process controller without a browser: detached start, re-attach, SIGTERM stop, resume.

A stand-in ``headless_train.py`` (written per test into a scratch folder used as the working
folder) behaves like the trainer where the controller looks: it logs steps to metrics.jsonl, and on
SIGTERM writes a ``stop`` event with its resume command, as ``train/loop.py`` does.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures.scripts import REPO_ROOT
from xtts_ft.errors import RunFolderError
from xtts_ft.layout import LOCK_FILE
from xtts_ft.run_lock import RunLock, lock_holder
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


# --- the run folder's lock (xtts_ft/run_lock.py): one trainer per folder, whoever started it ----------------------

LOCKING_TRAINER = r'''
import sys, time
from pathlib import Path
from xtts_ft.errors import RunFolderError
from xtts_ft.run_lock import RunLock
run = Path(next(a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("run.output_dir=")))
try:
    RunLock(run).acquire()  # what headless_train.py does first
except RunFolderError as exc:
    print(f"error: {exc}", flush=True)
    sys.exit(2)
time.sleep(120)
'''


@pytest.fixture
def locking_workdir(workdir: Path, monkeypatch) -> Path:
    (workdir / "headless_train.py").write_text(LOCKING_TRAINER)
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))  # the trainer the app starts imports this checkout's xtts_ft
    return workdir


def test_a_terminal_trainer_is_refused_while_the_apps_trainer_holds_the_folder(locking_workdir: Path):
    run = locking_workdir / "run"
    app = RunController(run, cwd=locking_workdir)
    record = app.start(locking_workdir / "cfg.yaml")
    try:
        wait_for(lambda: lock_holder(run) is not None and lock_holder(run).pid == record.pid)
        with pytest.raises(RunFolderError, match=rf"pid {record.pid}, since .*, started from the web app: .*"
                                                 rf"headless_train\.py --config"):
            RunLock(run).acquire()  # the same command from a terminal
    finally:
        os.kill(record.pid, signal.SIGKILL)
        wait_for(lambda: not app.state().running)


def test_start_is_refused_while_a_terminal_trainer_holds_the_folder(locking_workdir: Path):
    run = locking_workdir / "run"
    terminal = subprocess.Popen([sys.executable, str(locking_workdir / "headless_train.py"), "--config", "cfg.yaml",
                                 "--set", f"run.output_dir={run}"], cwd=locking_workdir)
    try:
        wait_for(lambda: lock_holder(run) is not None)
        with pytest.raises(RunProcessError, match=rf"another trainer is using this run folder \(pid {terminal.pid}, "
                                                  r"since .*, started from the command line: "):
            RunController(run, cwd=locking_workdir).start(locking_workdir / "cfg.yaml")
        assert not (run / "app_process.json").exists()  # nothing started
    finally:
        terminal.kill()
        terminal.wait()


def test_the_page_shows_the_refusal_of_the_apps_own_trainer(locking_workdir: Path):
    """Two trainers started at the same moment: the app's is refused by the lock, and the state says why."""
    run = locking_workdir / "run"
    run.mkdir()
    # a holder caught between its flock and its line: the app sees no holder and starts; its trainer is refused
    raw = ("import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
           "fcntl.flock(fd, fcntl.LOCK_EX); print('locked', flush=True); time.sleep(120)")
    holder = subprocess.Popen([sys.executable, "-c", raw, str(run / LOCK_FILE)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        app = RunController(run, cwd=locking_workdir)
        record = app.start(locking_workdir / "cfg.yaml")
        wait_for(lambda: not app.state().running, timeout=30)
        state = app.state()
        assert state.phase == "exited" and state.detail.startswith(f"the process (pid {record.pid}) was refused: ")
        assert "another trainer is using this run folder" in state.detail
    finally:
        holder.kill()
        holder.wait()
