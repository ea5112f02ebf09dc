"""The Ethiopic characters that must each have a token of their own in the extended vocabulary.

Four Unicode blocks hold the script Amharic is written in. Only assigned code points count
(``unicodedata`` says which): an unassigned one can never reach the tokenizer from a valid text.
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache

# (first, last) code point of each block, inclusive.
ETHIOPIC_BLOCKS: tuple[tuple[int, int], ...] = (
    (0x1200, 0x137F),  # Ethiopic
    (0x1380, 0x139F),  # Ethiopic Supplement
    (0x2D80, 0x2DDF),  # Ethiopic Extended
    (0xAB00, 0xAB2F),  # Ethiopic Extended-A
)


def is_ethiopic(char: str) -> bool:
    """True for any code point inside the four Ethiopic blocks (assigned or not)."""
    cp = ord(char)
    return any(first <= cp <= last for first, last in ETHIOPIC_BLOCKS)


@lru_cache(maxsize=1)
def ethiopic_characters() -> tuple[str, ...]:
    """Every assigned code point of the Ethiopic blocks, in code point order (495 with Unicode 14)."""
    chars = []
    for first, last in ETHIOPIC_BLOCKS:
        for cp in range(first, last + 1):
            char = chr(cp)
            if unicodedata.category(char) != "Cn":
                chars.append(char)
    return tuple(chars)
