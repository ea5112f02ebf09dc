"""The Train form's fields, built from the config schema, and its check by the config loader (no Gradio here).

Each field is a schema key (``training.lr``); its label, help text and choices come from the schema
dataclass (:mod:`xtts_ft.config.schema`), its value from the chosen config file. What a person typed
becomes a ``--set key=value`` override, read as YAML exactly as on the command line, and the whole
config goes through :func:`xtts_ft.config.load_config`: the page shows the loader's own one-line
messages, and Start passes the very same overrides to ``headless_train.py``.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Mapping, Optional, Sequence

import yaml

from xtts_ft.config import Config, load_config
from xtts_ft.config.schema import field_help
from xtts_ft.errors import ConfigError
from xtts_ft.layout import RunLayout

# The settings people change most (issue 26); run.output_dir is the app's run folder, set apart.
FORM_KEYS = (
    "dataset.path",
    "training.max_steps",
    "training.lr",
    "training.batch_size",
    "precision.mode",
    "evaluation.every_steps",
    "checkpoint.every_steps",
)


@dataclass(frozen=True)
class FormField:
    key: str  # section.name
    label: str
    help: str  # the schema's help text
    choices: Optional[tuple[str, ...]]  # a Literal field: its values; else typed text read as YAML
    default: object  # the schema's default

    @property
    def elem_id(self) -> str:
        return "field-" + self.key.replace(".", "-").replace("_", "-")


def _section_class(section: str) -> type:
    section_class: type = typing.get_type_hints(Config)[section]  # each section of Config is a dataclass
    return section_class


def form_fields(keys: Sequence[str] = FORM_KEYS) -> list[FormField]:
    out = []
    for key in keys:
        section, name = key.split(".")
        cls = _section_class(section)
        field = next(f for f in dataclasses.fields(cls) if f.name == name)
        hint = typing.get_type_hints(cls)[name]
        choices = tuple(str(a) for a in typing.get_args(hint)) if typing.get_origin(hint) is Literal else None
        out.append(FormField(key, key, field_help(cls, name), choices, field.default))
    return out


def config_values(config: Path, fields: Sequence[FormField]) -> dict[str, str]:
    """What the config file says for each field (the schema default where it says nothing), as form text."""
    try:
        raw = yaml.safe_load(Path(config).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        raw = {}
    out = {}
    for f in fields:
        section, name = f.key.split(".")
        block = raw.get(section) if isinstance(raw, dict) else None
        value = block.get(name, f.default) if isinstance(block, dict) else f.default
        out[f.key] = value if isinstance(value, str) else yaml.safe_dump(value, default_flow_style=True).strip() \
            .removesuffix("...").strip()
    return out


def overrides_from_form(values: Mapping[str, object], config: Path, fields: Sequence[FormField]) -> list[str]:
    """``key=value`` for every field that differs from the config file (unchanged fields add nothing)."""
    given = config_values(config, fields)
    out = []
    for f in fields:
        text = "" if values.get(f.key) is None else str(values[f.key]).strip()
        if text != str(given[f.key]).strip():
            out.append(f"{f.key}={text}")
    return out


def check_form(config: Path, run_dir: Path, overrides: Sequence[str]) -> Optional[str]:
    """The loader's message for this config + form (None: it loads); nothing is written. A problem with a form
    field is named after the field's key (the page shows no --set), one of the file after the file."""
    overrides = [f"run.output_dir={run_dir}", *overrides]
    try:
        load_config(config, overrides, given_as={item: item.partition("=")[0].strip() for item in overrides},
                    run_checks=True)  # what Start's headless_train.py checks before it loads anything
    except ConfigError as exc:
        return str(exc)
    return None


def config_choices(configs_dir: Path, run_dir: Path, extra: Optional[Path] = None) -> list[str]:
    """The configs a run can start from: ``configs/*.yaml``, the run's own config.yaml, and one named at launch."""
    found = sorted(str(p) for p in Path(configs_dir).glob("*.yaml")) if Path(configs_dir).is_dir() else []
    own = RunLayout(run_dir).config
    for p in (own if own.is_file() else None, extra):
        if p is not None and str(p) not in found:
            found.insert(0, str(p))
    return found
