"""Fixtures every test folder may use, defined in the ``tests.fixtures`` package and made visible here by name."""

from __future__ import annotations

from pathlib import Path

from tests.fixtures.demo_run import demo_run  # noqa: F401 - fixtures are found by name
from tests.fixtures.hub import dead_endpoint, no_retry  # noqa: F401
from tests.fixtures.tiny_model import tiny_base, tiny_base_dir, tiny_model_dir  # noqa: F401
from tests.fixtures.training import (  # noqa: F401 - the trainer's fixtures (tests/train, tests/reliability)
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
