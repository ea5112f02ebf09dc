"""Shared fixtures: the tiny random base model is written once per test session (~5 s)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def tiny_base_dir(tmp_path_factory) -> Path:
    from xtts_ft.tiny_model import write_tiny_model

    return write_tiny_model(tmp_path_factory.mktemp("tiny_base"))
