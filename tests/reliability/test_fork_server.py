"""The fork server's children report what a process started with Popen would: exit codes, signals, output, failures."""

from __future__ import annotations

import signal

import pytest

from tests.fixtures.fork_server import ForkServer

EXIT_WITH = "tests.reliability.scripts.exit_with"


@pytest.fixture(scope="module")
def server():
    with ForkServer([]) as running:
        yield running


def test_a_child_runs_the_module_as_main_with_its_arguments_environment_and_log(server, tmp_path):
    log = tmp_path / "child.log"
    assert server.start(EXIT_WITH, "code", 3, log=log, FORK_TEST="yes").wait(timeout=60) == 3
    assert log.read_text() == f"argv=['code', '3'] env=yes orig=['-m', '{EXIT_WITH}']\n"
    assert server.start(EXIT_WITH, "code", 0, log=log).wait(timeout=60) == 0  # appended; its own environment
    assert log.read_text().splitlines()[1] == f"argv=['code', '0'] env=None orig=['-m', '{EXIT_WITH}']"


def test_an_exception_is_shown_and_exits_1(server, tmp_path):
    log = tmp_path / "child.log"
    assert server.start(EXIT_WITH, "raise", log=log).wait(timeout=60) == 1
    assert "Traceback" in log.read_text() and "RuntimeError: a script that fails" in log.read_text()


def test_a_killed_child_reports_the_signal_and_close_ends_the_ones_left(tmp_path):
    with ForkServer([]) as own:
        child = own.start(EXIT_WITH, "sleep", log=tmp_path / "a.log")
        left = own.start(EXIT_WITH, "sleep", log=tmp_path / "b.log")
        assert child.poll() is None
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=60) == -signal.SIGKILL and child.returncode == -signal.SIGKILL
    assert left.returncode == -signal.SIGKILL  # close() killed it and the server reported it before ending
