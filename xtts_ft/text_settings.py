"""The text front-end a run tokenises with: its settings, and the one factory for its normaliser.

The tokenizer is built from these settings by ``xtts_ft.tokenizer.make_tokenizer`` (the tokenizer
package sits above this module; this module imports only ``xtts_ft.config`` and ``xtts_ft.text``).

Training, evaluation, export and inference must turn the same text into the same token ids. The
settings that decide that (``text.fold_homophones`` and ``tokenizer.char_limit``) have their
defaults in the config schema (``xtts_ft/config/schema.py``) only; everything else takes them from a
:class:`TextSettings` built from the config, or read back from what a run or an export recorded.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

from xtts_ft import text as text_front_end
from xtts_ft.config import Config, TextConfig, TokenizerConfig
from xtts_ft.json_types import JsonMapping, JsonObject


@dataclass(frozen=True)
class TextSettings:
    """What decides the token ids of a text: homophone folding and the sentence-splitting limit."""

    fold_homophones: bool
    char_limit: int

    @classmethod
    def from_config(cls, cfg: Config) -> TextSettings:
        return cls(fold_homophones=cfg.text.fold_homophones, char_limit=cfg.tokenizer.char_limit)

    @classmethod
    def from_sections(cls, text: JsonMapping, tokenizer: JsonMapping) -> TextSettings:
        """From the ``text`` and ``tokenizer`` sections of a written config.yaml; a missing key
        takes the schema's default, exactly as loading that config.yaml would."""
        return cls(
            fold_homophones=bool(text.get("fold_homophones", TextConfig.fold_homophones)),
            char_limit=int(tokenizer.get("char_limit", TokenizerConfig.char_limit)),
        )

    def to_dict(self) -> JsonObject:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: object, where: str, error: type[Exception]) -> TextSettings:
        """Read back :meth:`to_dict`; a missing or wrong-typed key raises ``error`` naming ``where``."""
        fields = [f.name for f in dataclasses.fields(cls)]
        if not isinstance(data, dict) or any(name not in data for name in fields):
            raise error(f"{where}: no text settings ({', '.join(fields)}); export the model again with this version")
        if not isinstance(data["fold_homophones"], bool) or not isinstance(data["char_limit"], int):
            raise error(f"{where}: text settings {data!r} are not (bool, int); export the model again")
        return cls(fold_homophones=data["fold_homophones"], char_limit=data["char_limit"])


def make_normalizer(fold_homophones: bool) -> Callable[[str], str]:
    """The project's Amharic normaliser (``xtts_ft.text.normalize_text``), str -> str.

    It takes the one setting it reads (``text.fold_homophones``, ``TextSettings.fold_homophones``);
    ``tokenizer.char_limit`` splits sentences at synthesis time, inside the tokenizer, and is no
    business of the normaliser, so no caller has to invent one to get the normaliser.
    """
    # looked up at call time: the one front end, whatever replaced it (tests stand in for it there)
    return lambda text: text_front_end.normalize_text(text, fold_homophones=fold_homophones).text
