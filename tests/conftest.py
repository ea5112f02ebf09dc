"""Fixtures every test folder may use, defined in the ``tests.fixtures`` package and made visible here by name.

Under pytest-xdist (``-n 2``) each worker first limits itself to one compute thread, before the imports
below load torch (tests/fixtures/parallel.py); serially nothing changes.
"""

from __future__ import annotations

from tests.fixtures.parallel import one_thread_per_worker, slow_files_first, worker_id

one_thread_per_worker()

from pathlib import Path  # noqa: E402 - after the thread limit: the imports below load torch

import pytest  # noqa: E402

from tests.fixtures.demo_run import built_demo_run, demo_run  # noqa: E402, F401 - fixtures are found by name
from tests.fixtures.fork_server import training_forks  # noqa: E402, F401
from tests.fixtures.hub import dead_endpoint, no_retry  # noqa: E402, F401
from tests.fixtures.tiny_model import tiny_base, tiny_base_dir, tiny_model_dir  # noqa: E402, F401
from tests.fixtures.training import (  # noqa: E402, F401 - the trainer's fixtures (tests/train, tests/reliability)
    built_model,
    codes_cache,
    dataset,
    model_factory,
    script_args,
    tokenizer,
    trainer,
    vocab,
)

REPO_ROOT = Path(__file__).resolve().parent.parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """In an xdist worker, the files with slow tests first (every worker collects, and sorts, alike)."""
    if worker_id() is not None:
        slow_files_first(items)
