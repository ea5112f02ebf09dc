"""Helpers shared by the reliability tests (fixtures live in conftest.py).

A module of its own, not conftest (see tests/train/trainhelpers.py): ``from conftest import``
would depend on which folder's conftest was imported last. The trainer's helpers are re-exported
from ``tests/train/trainhelpers.py``, so a fault here runs exactly the training the trainer's
own tests run.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
for _path in (REPO, HERE.parent / "train"):  # the trainer's helpers import as `trainhelpers`, as in tests/train
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from trainhelpers import read_events, read_metrics, small_config, train_lines, write_wav  # noqa: E402,F401

SCRIPTS = HERE / "scripts"


def copy_run(run: Path, dest: Path) -> Path:
    """A copy of a shared run directory that a test may damage."""
    shutil.copytree(run, dest)
    return dest
