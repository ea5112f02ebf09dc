"""The run configuration: one YAML file, a typed schema, validated before any heavy work.

:mod:`.schema` holds the dataclasses (each default and its help text, once); :mod:`.loading`
reads YAML, applies ``--set`` overrides and raises one :class:`ConfigError` listing every problem.
Everything else imports from here.
"""

from xtts_ft.config.loading import (
    config_from_dict,
    config_to_dict,
    dump_config,
    duplicate_keys,
    load_config,
    parse_override,
)
from xtts_ft.config.schema import (
    BASE_LANGUAGES,
    DEFAULT_TEST_SENTENCES,
    LANGUAGE_ALIASES,
    SHORT_TEXT_CHARS,
    AsrConfig,
    BaseModelConfig,
    CheckpointConfig,
    Config,
    DatasetConfig,
    DvaeConfig,
    EarlyStoppingConfig,
    EvaluationConfig,
    IngestConfig,
    LanguageAsrConfig,
    PrecisionConfig,
    RunConfig,
    ServeConfig,
    StabilityConfig,
    TextConfig,
    TokenizerConfig,
    TrainingConfig,
    field_choices,
    field_help,
    is_hub_id,
    is_local_source,
    is_short_text,
    opt,
    with_changes,
)
from xtts_ft.errors import ConfigError

__all__ = [
    "BASE_LANGUAGES", "DEFAULT_TEST_SENTENCES", "LANGUAGE_ALIASES", "SHORT_TEXT_CHARS", "AsrConfig", "BaseModelConfig",
    "CheckpointConfig", "Config", "ConfigError", "DatasetConfig", "DvaeConfig", "EarlyStoppingConfig",
    "EvaluationConfig", "IngestConfig", "LanguageAsrConfig", "PrecisionConfig", "RunConfig", "ServeConfig",
    "StabilityConfig", "TextConfig", "TokenizerConfig", "TrainingConfig",
    "config_from_dict", "config_to_dict", "dump_config", "duplicate_keys", "field_choices", "field_help", "is_hub_id",
    "is_local_source", "is_short_text", "load_config", "opt", "parse_override", "with_changes",
]
