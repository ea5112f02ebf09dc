"""The text front-end a run tokenises with: its settings, and the one factory for its normaliser and tokenizer.

Training, evaluation, export and inference must turn the same text into the same token ids. The
settings that decide that (``text.fold_homophones`` and ``tokenizer.char_limit``) have their
defaults in the config schema (``xtts_ft/config/schema.py``) only; everything else takes them from a
:class:`TextSettings` built from the config, or read back from what a run or an export recorded.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional

if TYPE_CHECKING:  # the tokenizer module imports coqui: only when a tokenizer is built
    from xtts_ft.config import Config
    from xtts_ft.tokenizer.voice_tokenizer import AmharicTokenizer


@dataclass(frozen=True)
class TextSettings:
    """What decides the token ids of a text: homophone folding and the sentence-splitting limit."""

    fold_homophones: bool
    char_limit: int

    @classmethod
    def from_config(cls, cfg: Config) -> TextSettings:
        return cls(fold_homophones=cfg.text.fold_homophones, char_limit=cfg.tokenizer.char_limit)

    @classmethod
    def from_sections(cls, text: dict, tokenizer: dict) -> TextSettings:
        """From the ``text`` and ``tokenizer`` sections of a written config.yaml; a missing key
        takes the schema's default, exactly as loading that config.yaml would."""
        from xtts_ft.config import TextConfig, TokenizerConfig

        return cls(
            fold_homophones=bool(text.get("fold_homophones", TextConfig.fold_homophones)),
            char_limit=int(tokenizer.get("char_limit", TokenizerConfig.char_limit)),
        )

    def to_dict(self) -> dict[str, Any]:
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


def make_normalizer(settings: TextSettings) -> Callable[[str], str]:
    """The project's Amharic normaliser (``xtts_ft.text.normalize_text``) with the run's settings, str -> str."""
    from xtts_ft.text import normalize_text

    fold = settings.fold_homophones
    return lambda text: normalize_text(text, fold_homophones=fold).text


def make_tokenizer(
    vocab_path: str | os.PathLike[str],
    settings: TextSettings,
    *,
    normalizer: Optional[Callable[[str], str]] = None,
) -> AmharicTokenizer:
    """The AmharicTokenizer for ``vocab_path`` with the run's settings.

    ``normalizer`` replaces the project's normaliser (tests use a stand-in); by default it is
    :func:`make_normalizer` of the same settings, the one the tokenizer stage trained on.
    """
    from xtts_ft.tokenizer.voice_tokenizer import AmharicTokenizer

    return AmharicTokenizer(
        vocab_path, char_limit=settings.char_limit, fold_homophones=settings.fold_homophones, normalizer=normalizer
    )
