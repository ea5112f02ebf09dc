"""The Ethiopic characters that must each have a token of their own in the extended vocabulary.

The Unicode blocks are :data:`xtts_ft.text.script.ETHIOPIC_RANGES` (the normaliser keeps the same
letters). Only assigned code points count (``unicodedata`` says which): an unassigned one can
never reach the tokenizer from a valid text.
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache

from xtts_ft.text.script import ETHIOPIC_RANGES, is_ethiopic

__all__ = ["ETHIOPIC_RANGES", "ethiopic_characters", "is_ethiopic"]


@lru_cache(maxsize=1)
def ethiopic_characters() -> tuple[str, ...]:
    """Every assigned code point of the Ethiopic blocks, in code point order (495 with Unicode 14)."""
    chars = []
    for first, last in ETHIOPIC_RANGES:
        for cp in range(first, last + 1):
            char = chr(cp)
            if unicodedata.category(char) != "Cn":
                chars.append(char)
    return tuple(chars)
