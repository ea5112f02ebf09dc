"""docs/configuration.md's table is the schema's: every key, its default and its help text."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from xtts_ft.config.table import (
    END_MARKER,
    START_MARKER,
    TABLE_DOC,
    TableMarkersMissing,
    render_table,
    sections,
    table_in,
    with_table,
)

DOC = Path(__file__).resolve().parents[2] / TABLE_DOC


def test_the_documented_table_matches_the_schema():
    assert table_in(DOC.read_text(encoding="utf-8")) == render_table(), (
        f"{TABLE_DOC}'s configuration table differs from xtts_ft/config/schema.py; run python utils/config_table.py")


def test_every_key_default_and_help_is_in_the_table():
    rows = {line.split(" | ")[0].strip("| `"): line for line in render_table().splitlines()[2:]}

    def check(prefix: str, defaults) -> None:
        for f in dataclasses.fields(defaults):
            value = getattr(defaults, f.name)
            if dataclasses.is_dataclass(value):  # a nested section (training.early_stopping): one row per field
                check(f"{prefix}.{f.name}", value)
                continue
            row = rows.pop(f"{prefix}.{f.name}")
            assert f.metadata["help"].split()[0] in row  # every field has help text, and it is shown

    for name, section in sections():
        check(name, section())
    assert "training.early_stopping.patience" not in rows and not rows  # nested keys included, nothing else


def test_rewriting_puts_the_table_between_the_markers_and_keeps_the_rest():
    text = f"intro\n{START_MARKER}\n| stale |\n{END_MARKER}\noutro\n"
    new = with_table(text)
    assert new.startswith(f"intro\n{START_MARKER}\n") and new.endswith(f"{END_MARKER}\noutro\n")
    assert table_in(new) == render_table() and "stale" not in new
    with pytest.raises(TableMarkersMissing):
        with_table("no markers here")
