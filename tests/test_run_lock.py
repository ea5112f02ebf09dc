"""One trainer per run folder (xtts_ft/run_lock.py), with real processes: a holder in a process of its own,
refused in this one by pid and start; released by the kernel when the holder is killed with SIGKILL; the folder
itself locked, so that deleting trainer.lock frees nothing and a folder moved from under its holder stops it."""

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
from xtts_ft.run_lock import STARTED_BY_ENV, RunLock, lock_holder, refuse_if_held_elsewhere

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


CHECKING_HOLDER = """
import sys
from xtts_ft.errors import RunFolderError
from xtts_ft.run_lock import RunLock, confirm_held
RunLock(sys.argv[1]).acquire()
print("held", flush=True)
for _ in sys.stdin:  # a line: check the folder, as the trainer does before each checkpoint
    try:
        confirm_held(sys.argv[1])
        print("ok", flush=True)
    except RunFolderError as exc:
        print(exc, flush=True)
"""


def start_checking_holder(run: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", CHECKING_HOLDER, str(run)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=script_env())
    assert proc.stdout.readline().strip() == "held"
    return proc


def check(holder: subprocess.Popen) -> str:
    holder.stdin.write("check\n")
    holder.stdin.flush()
    return holder.stdout.readline().strip()


def test_a_deleted_lock_file_lets_no_one_in_and_the_holder_writes_it_again(tmp_path):
    """The folder itself is locked: deleting trainer.lock frees nothing; the refusal names the holder from the
    kernel's lock table, and the holder writes its line again at its next check (before its next checkpoint)."""
    run = tmp_path / "run"
    holder = start_checking_holder(run)
    try:
        line = RunLayout(run).lock_file.read_text()
        RunLayout(run).lock_file.unlink()
        started = time.monotonic()
        with pytest.raises(RunFolderError, match=f"another trainer .*pid {holder.pid}, since .*, started from the "
                                                 f"command line: {sys.executable} -c"):
            RunLock(run).acquire()
        assert time.monotonic() - started < 1.0  # no wait for a line that only the next checkpoint writes
        assert not RunLayout(run).lock_file.exists()  # refused before creating anything
        assert lock_holder(run).pid == holder.pid  # the web app's view too
        assert check(holder) == "ok" and RunLayout(run).lock_file.read_text() == line
        assert check(holder) == "ok"  # nothing to write the second time
    finally:
        holder.kill()
        holder.wait()


def test_a_folder_moved_from_under_its_holder_stops_it_and_the_new_folder_is_free(tmp_path):
    run = tmp_path / "run"
    holder = start_checking_holder(run)
    try:
        run.rename(tmp_path / "moved")
        run.mkdir()  # a fresh folder at the path: another run may use it
        assert check(holder) == (f"{run}: this run folder was moved, deleted or replaced while this trainer (pid "
                                 f"{holder.pid}) used it, so it writes nothing more there; put the folder back and "
                                 f"run the same command again to resume, or give a new run its own run.output_dir")
        with RunLock(run) as lock:
            assert lock.acquired
    finally:
        holder.kill()
        holder.wait()


def test_a_torchrun_rank_is_refused_by_another_trainer_not_by_its_own_rank_0(tmp_path):
    """Ranks above 0 do not lock: they are refused at once by a holder that torchrun did not start with them
    (same parent: the torchrun agent); here this test is the agent of both children."""
    run = tmp_path / "run"
    holder = start_holder(run)
    probe = "import sys; from xtts_ft.run_lock import refuse_if_held_elsewhere as r; r(sys.argv[1]); print('free')"
    try:
        sibling = subprocess.run([sys.executable, "-c", probe, str(run)], capture_output=True, text=True,
                                 env=script_env(), timeout=60)
        assert sibling.stdout.strip() == "free", sibling.stderr
        with pytest.raises(RunFolderError, match=f"another trainer .*pid {holder.pid},"):
            refuse_if_held_elsewhere(run)  # its parent is not ours
    finally:
        holder.kill()
        holder.wait()
    refuse_if_held_elsewhere(run)  # nobody holds it now


@pytest.mark.parametrize("where", ["/proc/xtts_ft_run", "file/run"])
def test_a_run_folder_that_cannot_be_made_is_one_line_naming_it(tmp_path, where):
    (tmp_path / "file").write_text("not a folder")
    run = Path(where) if where.startswith("/") else tmp_path / where
    with pytest.raises(RunFolderError) as refused:
        RunLock(run).acquire()
    assert str(refused.value).startswith(f"{run}: cannot create the run folder (") and "\n" not in str(refused.value)
    assert str(refused.value).endswith("set run.output_dir to a folder this user can create and write, e.g. --set "
                                       "run.output_dir=runs/NAME")
