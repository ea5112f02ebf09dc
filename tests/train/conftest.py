"""The trainer tests' fixtures live in tests/fixtures/training.py and are made visible by tests/conftest.py."""
