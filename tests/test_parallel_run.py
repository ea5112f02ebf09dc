"""The suite in parallel workers (tests/fixtures/parallel.py): shared artefacts built once, one thread per worker.

A small pytest run with two xdist workers in its own processes (its own folder, its own conftest) uses the
helpers as the suite's conftest does; the serial case and the failure paths are checked in this process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from filelock import Timeout

from tests.fixtures.parallel import THREAD_VARIABLES, built_once, one_thread_per_worker, slow_files_first, used_alone
from tests.fixtures.scripts import script_env

CONFTEST = '''
import os, time
from pathlib import Path

from tests.fixtures.parallel import one_thread_per_worker

one_thread_per_worker()

import pytest  # noqa: E402

from tests.fixtures.parallel import built_once  # noqa: E402

LOG = Path(__file__).parent / "log"


def note(line):
    with open(LOG, "a") as f:
        f.write(line + "\\n")


@pytest.fixture(scope="session")
def thing(tmp_path_factory):
    def build(folder):
        note("built by " + str(os.environ.get("PYTEST_XDIST_WORKER")))
        time.sleep(1.0)  # the other worker asks while this one builds
        (folder / "made").write_text("x")

    return built_once(tmp_path_factory, "thing", build)
'''

TESTS = '''
import os, subprocess, sys

import torch

from conftest import note


def check(thing, name):
    assert (thing / "made").read_text() == "x"
    child = subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('OMP_NUM_THREADS'))"],
                           capture_output=True, text=True, check=True).stdout.strip()
    note(f"{name} {os.environ.get('PYTEST_XDIST_WORKER')} {thing} torch={torch.get_num_threads()} child={child}")


def test_a(thing): check(thing, "a")
def test_b(thing): check(thing, "b")
def test_c(thing): check(thing, "c")
def test_d(thing): check(thing, "d")
'''


def run_inner(folder: Path, *args: str) -> list[str]:
    """Run the small suite in ``folder`` with ``args``; the lines its build and tests noted (no thread setting
    of this process's environment reaches it)."""
    folder.mkdir()
    (folder / "conftest.py").write_text(CONFTEST)
    (folder / "test_inner.py").write_text(TESTS)
    env = {k: v for k, v in script_env().items() if k not in THREAD_VARIABLES and k != "PYTEST_XDIST_WORKER"}
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:benchmark",
                          "--basetemp", str(folder / "tmp"), *args], cwd=folder, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return (folder / "log").read_text().splitlines()


def test_two_workers_build_a_shared_folder_once_and_run_one_thread_each(tmp_path):
    lines = run_inner(tmp_path / "inner", "-n", "2", "--dist", "load")
    built = [line for line in lines if line.startswith("built by")]
    tests = [line.split() for line in lines if not line.startswith("built by")]
    assert len(built) == 1 and built[0] in ("built by gw0", "built by gw1"), lines
    assert sorted(t[0] for t in tests) == ["a", "b", "c", "d"]
    assert {t[1] for t in tests} == {"gw0", "gw1"}  # both workers ran tests...
    assert {t[2] for t in tests} == {str(tmp_path / "inner" / "tmp" / "shared" / "thing")}  # ...on one folder
    assert {t[3] for t in tests} == {"torch=1"} and {t[4] for t in tests} == {"child=1"}


def test_a_serial_run_builds_its_own_folder_and_leaves_the_threads_alone(tmp_path, monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    for name in THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    one_thread_per_worker()
    assert not any(name in os.environ for name in THREAD_VARIABLES)
    factory = Factory(tmp_path)
    folders = [built_once(factory, "thing", lambda folder: (folder / "made").write_text("x")) for _ in range(2)]
    assert folders == [tmp_path / "thing0", tmp_path / "thing1"]  # tmp_path_factory.mktemp per session, as before
    assert all((folder / "made").is_file() for folder in folders) and not (tmp_path / "shared").exists()


class Factory:
    """A stand-in tmp_path_factory: a serial run's folders, or worker gw0's own folder inside the run's folder."""

    def __init__(self, run: Path):
        self.run = run
        self.made = 0

    def getbasetemp(self) -> Path:
        return self.run / "popen-gw0"

    def mktemp(self, name: str) -> Path:
        folder = self.run / f"{name}{self.made}"
        self.made += 1
        folder.mkdir()
        return folder


def test_a_failed_build_is_removed_and_built_again_by_the_next_that_asks(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    factory = Factory(tmp_path)
    calls = []

    def broken(folder: Path) -> None:
        (folder / "half").write_text("x")
        raise RuntimeError("build failed")

    def good(folder: Path) -> None:
        calls.append(folder)
        assert not (folder / "half").exists()  # nothing the failed build left
        (folder / "made").write_text("x")

    with pytest.raises(RuntimeError, match="build failed"):
        built_once(factory, "thing", broken)
    assert built_once(factory, "thing", good) == tmp_path / "shared" / "thing"
    assert built_once(factory, "thing", broken) == tmp_path / "shared" / "thing"  # built: not asked again
    assert calls == [tmp_path / "shared" / "thing"] and (calls[0] / "made").is_file()


def test_a_folder_used_alone_is_refused_to_a_second_user_and_its_lock_lies_beside_it(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    with used_alone(folder):
        with pytest.raises(Timeout):
            used_alone(folder).acquire(timeout=0)
    assert os.listdir(folder) == []
    with used_alone(folder):  # free again
        pass


def test_files_with_slow_tests_go_first_and_each_file_keeps_its_order():
    def item(path: str, name: str, slow: bool = False) -> SimpleNamespace:
        return SimpleNamespace(path=Path(path), name=name, get_closest_marker=lambda mark: object() if slow else None)

    items = [item("a.py", "a1"), item("b.py", "b1"), item("b.py", "b2", slow=True), item("c.py", "c1"),
             item("a.py", "a2"), item("d.py", "d1", slow=True), item("b.py", "b3")]
    slow_files_first(items)
    assert [i.name for i in items] == ["b1", "b2", "d1", "b3", "a1", "c1", "a2"]
