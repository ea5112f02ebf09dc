"""The trainer tests' fixtures live in tests/fixtures/training.py and are made visible by tests/conftest.py;
the fork server that starts their training processes is made visible here."""

from __future__ import annotations

from tests.fixtures.fork_server import training_forks  # noqa: F401 - found by name
