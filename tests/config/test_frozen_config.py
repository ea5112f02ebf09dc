"""A config, once built, says the same thing wherever it is passed: every section is frozen, and a change makes a
new config. And the facts the schema states once agree with the code that uses them (milliseconds, no model)."""

from __future__ import annotations

import dataclasses

import pytest

from xtts_ft.config import (
    SHORT_TEXT_CHARS,
    Config,
    DatasetConfig,
    RunConfig,
    ServeConfig,
    config_from_dict,
    is_short_text,
    schema,
    with_changes,
)


def _sections() -> list[type]:
    return [c for c in vars(schema).values()
            if isinstance(c, type) and dataclasses.is_dataclass(c) and c.__module__ == schema.__name__]


def test_every_config_section_is_frozen():
    sections = _sections()
    assert {Config, RunConfig, DatasetConfig, ServeConfig} <= set(sections)
    assert [s.__name__ for s in sections if not s.__dataclass_params__.frozen] == []  # type: ignore[attr-defined]
    cfg = Config()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.training.lr = 1.0  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.training = cfg.training  # type: ignore[misc]


def test_a_change_makes_a_new_config_and_leaves_the_old_one():
    cfg = Config()
    changed = with_changes(cfg, run={"device": "cpu"}, training={"max_steps": 5})
    assert (changed.run.device, changed.training.max_steps) == ("cpu", 5)
    assert (cfg.run.device, cfg.training.max_steps) == (RunConfig.device, schema.TrainingConfig.max_steps)
    assert changed.precision is cfg.precision  # sections nobody changed are shared, not copied


def test_one_spelling_of_a_language_whichever_way_the_config_is_built():
    assert RunConfig(language="amh").language == "am" and DatasetConfig(language="amh").language == "am"
    built = config_from_dict({"run": {"language": "amh"}, "dataset": {"path": ".", "language": "amh"}})
    assert built.run.language == built.dataset.language == "am"
    assert DatasetConfig(short_clips=False).short_clips == "off"  # YAML 1.1's bare off


def test_short_text_is_one_rule_everywhere():
    from xtts_ft.evaluate.intelligibility import length_bucket

    lengths = range(SHORT_TEXT_CHARS + 5)
    short = [n for n in lengths if is_short_text("ሀ" * n)]
    assert short == list(range(SHORT_TEXT_CHARS))  # under SHORT_TEXT_CHARS characters
    assert [n for n in lengths if length_bucket("ሀ" * n) == "short"] == short  # the evaluation's bucket
    assert [n for n in lengths if n <= ServeConfig().short_text_chars] == short  # the server compares with <=
    assert [n for n in lengths if n < ServeConfig().min_piece_chars] == short  # ... and joins pieces shorter than
    help_texts = " ".join(field.metadata.get("help", "") for field in dataclasses.fields(DatasetConfig))
    assert f"under {SHORT_TEXT_CHARS} characters" in help_texts and "at most 20 characters" not in help_texts

