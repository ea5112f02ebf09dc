"""Fixtures for the reliability tests: the tiny XTTS, data and code cache of tests/train, reused.

The fixtures are imported from ``tests/train/conftest.py`` (tiny model, extended vocabulary, 12+4
synthetic clips, their DVAE codes, the in-process ``trainer`` and the subprocess ``script_args``),
so a fault here runs exactly the training the trainer's own tests run.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.train.conftest import (  # noqa: E402,F401 - fixtures are found by name
    built_model,
    codes_cache,
    dataset,
    model_factory,
    read_events,
    read_metrics,
    script_args,
    small_config,
    tiny_base,
    tokenizer,
    train_lines,
    trainer,
    vocab,
)

SCRIPTS = HERE / "scripts"
