"""Shared fixtures: the tiny random base model is written once per test session (~5 s)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def tiny_base_dir(tmp_path_factory) -> Path:
    from xtts_ft.random_model import write_tiny_model

    return write_tiny_model(tmp_path_factory.mktemp("tiny_base"))


@pytest.fixture
def dead_endpoint() -> str:
    """A loopback URL nobody listens on: the hub client's "no network" (it retries with back-off, ~25 s, then gives up)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"
