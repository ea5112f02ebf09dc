"""Helpers shared by the reliability tests (fixtures live in conftest.py).

A module of its own, not conftest (see tests/train/trainhelpers.py): ``from conftest import``
would depend on which folder's conftest was imported last. The trainer's helpers are re-exported
from ``tests/train/trainhelpers.py``, so a fault here runs exactly the training the trainer's
own tests run.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from typing import Callable

from tests.train.trainhelpers import read_events, read_metrics, small_config, train_lines, write_wav  # noqa: F401

REPO = Path(__file__).resolve().parents[2]


def copy_run(run: Path, dest: Path) -> Path:
    """A copy of a shared run directory that a test may damage."""
    shutil.copytree(run, dest)
    return dest


def wait_for(check: Callable[[], object], timeout: float, what: str, proc: subprocess.Popen) -> None:
    """Poll ``check`` until it is true; fails when ``proc`` (the trainer it waits on) ends first, or after ``timeout``."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return
        assert proc.poll() is None, f"the trainer ended (rc {proc.returncode}) before {what}"
        time.sleep(0.2)
    raise AssertionError(f"no {what} within {timeout} s")
