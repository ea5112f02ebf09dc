"""Amharic text front-end: what the model reads.

``normalize_text`` turns raw (possibly code-switched) Amharic into the small closed alphabet
described in :mod:`xtts_ft.text.normalizer`; numbers, Ge'ez numerals and abbreviations become
words, and every character that cannot be kept is counted in ``NormalizedText.dropped``.
Standard library only; importing changes nothing global.
"""

from .normalizer import NORMALIZER_VERSION, PUNCTUATION, NormalizedText, normalize_lines, normalize_text
from .numbers import (
    ethiopic_numeral_to_int,
    number_to_amharic,
    ordinal_to_amharic,
)
from .script import ETHIOPIC_RANGES, fold_homophones, is_ethiopic, is_ethiopic_letter

__all__ = [
    "ETHIOPIC_RANGES",
    "NORMALIZER_VERSION",
    "PUNCTUATION",
    "NormalizedText",
    "ethiopic_numeral_to_int",
    "fold_homophones",
    "is_ethiopic",
    "is_ethiopic_letter",
    "normalize_lines",
    "normalize_text",
    "number_to_amharic",
    "ordinal_to_amharic",
]
