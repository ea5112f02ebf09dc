"""One trainer per run folder (xtts_ft/run_lock.py), with real processes: a holder in a process of its own,
refused in this one by pid and start; released by the kernel when the holder is killed with SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures.scripts import script_env
from xtts_ft.errors import RunFolderError
from xtts_ft.layout import RunLayout
from xtts_ft.run_lock import STARTED_BY_ENV, RunLock, lock_holder

HOLDER = """
import sys, time
from xtts_ft.run_lock import RunLock
RunLock(sys.argv[1]).acquire()
print("held", flush=True)
time.sleep(600)
"""


def start_holder(run: Path, **env: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(run)], stdout=subprocess.PIPE, text=True,
                            env=script_env(**env))
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_trainer_is_refused_by_pid_and_the_lock_dies_with_the_holder(tmp_path):
    run = tmp_path / "run"
    holder = start_holder(run)
    try:
        with pytest.raises(RunFolderError) as refused:
            RunLock(run).acquire()
        line = str(refused.value)
        assert "\n" not in line and f"pid {holder.pid}" in line and "another trainer" in line
        assert f"from the command line: {sys.executable} -c" in line and f"kill -TERM {holder.pid}" in line
        assert lock_holder(run).pid == holder.pid  # what a reader (the web app) sees, without taking the lock
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    # a kill -9 leaves the holder's line in the file, but no lock: the kernel released it with the process
    assert json.loads(RunLayout(run).lock_file.read_text())["pid"] == holder.pid
    assert lock_holder(run) is None
    with RunLock(run) as lock:
        assert lock.acquired and lock_holder(run).pid == os.getpid()
    assert RunLayout(run).lock_file.read_text() == "" and lock_holder(run) is None  # released: nobody holds it


def test_the_lock_is_reentrant_within_a_process_and_released_by_the_outermost(tmp_path):
    run = tmp_path / "run"
    outer, inner = RunLock(run).acquire(), RunLock(run).acquire()  # the command line, then the pipeline inside it
    inner.release()
    assert lock_holder(run).pid == os.getpid()
    probe = subprocess.run([sys.executable, "-c", HOLDER, str(run)], capture_output=True, text=True,
                           env=script_env(), timeout=120)
    assert probe.returncode != 0 and f"pid {os.getpid()}" in probe.stderr  # still held for other processes
    outer.release()
    assert lock_holder(run) is None
    holder = start_holder(run)  # free for the next trainer
    holder.kill()
    holder.wait()


def test_the_holder_says_it_was_started_by_the_web_app(tmp_path):
    run = tmp_path / "run"
    holder = start_holder(run, **{STARTED_BY_ENV: "web app"})
    try:
        with pytest.raises(RunFolderError, match=f"pid {holder.pid}, since .*, started from the web app: "):
            RunLock(run).acquire()
    finally:
        holder.kill()
        holder.wait()


def test_a_holder_that_has_not_written_its_line_yet_is_waited_for(tmp_path):
    """A trainer refused in the moment between the holder's flock and its line still names the holder."""
    run = tmp_path / "run"
    slow = """
import fcntl, json, os, sys, time, psutil
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(1.0)
me = psutil.Process()
os.write(fd, json.dumps({"pid": me.pid, "create_time": me.create_time(), "started_as": "the command line: slow",
                         "since": "now"}).encode())
time.sleep(600)
"""
    run.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", slow, str(RunLayout(run).lock_file)], stdout=subprocess.PIPE,
                            text=True, env=script_env())
    try:
        assert proc.stdout.readline().strip() == "locked"
        started = time.monotonic()
        with pytest.raises(RunFolderError, match=f"pid {proc.pid}, since now, started from the command line: slow"):
            RunLock(run).acquire()
        assert time.monotonic() - started < 3.0 + 1.0
    finally:
        proc.kill()
        proc.wait()


def test_how_a_trainer_was_started_is_said_for_torchrun_the_web_app_and_a_terminal(monkeypatch):
    from xtts_ft.run_lock import how_started

    monkeypatch.delenv(STARTED_BY_ENV, raising=False)
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert how_started().startswith(f"the command line: {sys.executable}")
    monkeypatch.setenv("WORLD_SIZE", "2")  # what torchrun sets in every rank (only rank 0 takes the lock)
    assert how_started().startswith(f"torchrun (2 processes): {sys.executable}")
    monkeypatch.setenv(STARTED_BY_ENV, "web app")
    assert how_started().startswith(f"the web app: {sys.executable}")


def test_a_worker_forked_by_the_trainer_does_not_keep_the_folder_locked(tmp_path):
    """Loader and prepare workers are forked from the trainer; one that outlives a killed trainer (they notice
    within seconds) must not keep the next trainer out."""
    run = tmp_path / "run"
    forking = """
import os, sys, time
from xtts_ft.run_lock import RunLock
RunLock(sys.argv[1]).acquire()
child = os.fork()
if child == 0:
    print(os.getpid(), flush=True)  # the worker is past fork's hooks (a busy machine may run it late)
    time.sleep(600)
    os._exit(0)
time.sleep(600)
"""
    holder = subprocess.Popen([sys.executable, "-c", forking, str(run)], stdout=subprocess.PIPE, text=True,
                              env=script_env())
    # Read from the worker itself: it runs its fork hook when it first gets the CPU, which on a loaded machine
    # can come after the parent has printed and been killed (then the worker held the lock for those moments).
    worker = int(holder.stdout.readline())
    try:
        with pytest.raises(RunFolderError, match=f"pid {holder.pid},"):
            RunLock(run).acquire()  # the trainer still holds it
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        os.kill(worker, 0)  # the forked worker still lives
        with RunLock(run) as lock:  # and the folder is free all the same
            assert lock.acquired
    finally:
        os.kill(worker, signal.SIGKILL)
        holder.kill()
        holder.wait()
