"""The trainer tests' fixtures live in tests/fixtures/training.py (tests/reliability uses them too)."""

from tests.fixtures.training import (  # noqa: F401 - fixtures are found by name
    built_model,
    codes_cache,
    dataset,
    model_factory,
    script_args,
    tokenizer,
    trainer,
    vocab,
)
