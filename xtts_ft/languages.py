"""Language codes, defined once: the language this project teaches XTTS, its aliases, and the base model's.

A foundation module (it imports nothing of the project): the config schema checks codes with it,
the tokenizer encodes with it, and synthesis, serving and export store and compare the canonical code.
"""

from __future__ import annotations

AMHARIC = "am"  # the one code stored in configs, vocabularies, checkpoints and exports
#: Every code accepted for a language this project teaches, mapped to the one that is stored (some tools say 'amh').
LANGUAGE_ALIASES = {"am": AMHARIC, "amh": AMHARIC}
#: Languages the XTTS-v2 base model already speaks: extra datasets in these go through coqui's own text handling.
BASE_LANGUAGES = (
    "en", "es", "fr", "de", "it", "pt", "pl", "tr", "ru", "nl", "cs", "ar", "zh-cn", "hu", "ko", "ja", "hi",
)


def canonical_language(code: str) -> str:
    """'amh' -> 'am'; every other code unchanged."""
    return LANGUAGE_ALIASES.get(code, code)


def aliases_of(code: str) -> tuple[str, ...]:
    """Every code that stands for ``code`` (itself included): 'am' -> ('am', 'amh')."""
    canonical = canonical_language(code)
    return tuple(alias for alias, target in LANGUAGE_ALIASES.items() if target == canonical) or (code,)
