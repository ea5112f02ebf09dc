"""Facts about the Ethiopic script: code-point ranges, letter tests, homophone folding.

Ethiopic syllables are laid out in rows of eight code points: one consonant, its seven vowel
orders (ä u i a e ə o) and usually an eighth, labialised ("-wa") or "-oa" form. Homophone
series therefore map onto each other by a fixed offset, order by order, which is how the
folding table below is built.

Homophone folding (optional, ``fold_homophones=True``), each order kept:

=================  =====================  ==========================================
from               to                     notes
=================  =====================  ==========================================
ሐ ሑ ሒ ሓ ሔ ሕ ሖ      ሀ ሁ ሂ ሃ ሄ ህ ሆ
ሗ (HHWA, ḥʷa)      ኋ (XWAA, hʷa)          the ሀ row has no labialised form; ኋ is the
                                          usual spelling of /hʷa/ (ኋላ)
ኀ ኁ ኂ ኃ ኄ ኅ ኆ ኇ    ሀ ሁ ሂ ሃ ሄ ህ ሆ ሇ
ኈ ኊ ኋ ኌ ኍ          kept                   no labialised ሀ forms exist to fold into
ሠ ... ሦ ሧ          ሰ ... ሶ ሷ              labialised ሧ (SZWA) -> ሷ (SWA)
ዐ ዑ ዒ ዓ ዔ ዕ ዖ      አ ኡ ኢ ኣ ኤ እ ኦ
ፀ ፁ ፂ ፃ ፄ ፅ ፆ      ጸ ጹ ጺ ጻ ጼ ጽ ጾ
ፇ (TZOA)           kept                   ጿ is TSWA, a different order
ሃ ሓ ኃ              ሀ                      4th order to 1st: after h and the glottal
ኣ ዓ                አ                      stop ä is said as a, so ሀ/ሃ and አ/ኣ sound
                                          the same (ሀገር/ሃገር, አመት/ዓመት)
=================  =====================  ==========================================
"""

from __future__ import annotations

import re
import unicodedata

#: Inclusive code-point ranges of the Ethiopic blocks Amharic text can hold: Ethiopic, Ethiopic
#: Supplement, Ethiopic Extended and Ethiopic Extended-A. The one definition: the normaliser keeps
#: these letters and the tokenizer reserves a token for each of them (xtts_ft/tokenizer/ethiopic.py).
#: Ethiopic Extended-B (U+1E7E0-U+1E7FF, Gurage syllables) is left out on purpose: Amharic does not
#: use it, and a letter kept here without a reserved token would reach the model as [UNK].
ETHIOPIC_RANGES: tuple[tuple[int, int], ...] = (
    (0x1200, 0x137F),
    (0x1380, 0x139F),
    (0x2D80, 0x2DDF),
    (0xAB00, 0xAB2F),
)


def is_ethiopic(s: str) -> bool:
    """True when ``s`` is non-empty and every character lies in an Ethiopic block.

    Blocks include Ethiopic punctuation (፡ ። ...) and numerals (፩ ... ፼); use
    :func:`is_ethiopic_letter` to test for syllables only.
    """
    if not s:
        return False
    for ch in s:
        cp = ord(ch)
        if not any(lo <= cp <= hi for lo, hi in ETHIOPIC_RANGES):
            return False
    return True


def _letter_ranges() -> list[tuple[int, int]]:
    """Contiguous runs of assigned Ethiopic letters (category Lo) in ETHIOPIC_RANGES."""
    runs: list[tuple[int, int]] = []
    for lo, hi in ETHIOPIC_RANGES:
        for cp in range(lo, hi + 1):
            if unicodedata.category(chr(cp)) != "Lo":
                continue
            if runs and runs[-1][1] == cp - 1:
                runs[-1] = (runs[-1][0], cp)
            else:
                runs.append((cp, cp))
    return runs


_LETTER_RUNS = _letter_ranges()

#: Body of a regex character class (no brackets) matching every Ethiopic letter.
ETHIOPIC_LETTER_CLASS = "".join(
    chr(lo) if lo == hi else f"{chr(lo)}-{chr(hi)}" for lo, hi in _LETTER_RUNS
)
#: Shorter class body for word-boundary look-arounds: first to last letter of each block,
#: unassigned gaps included (cheaper to compile many times; gaps never occur in real text).
ETHIOPIC_LETTER_SPAN = "".join(
    f"{chr(min(lo for lo, _ in runs))}-{chr(max(hi for _, hi in runs))}"
    for runs in ([r for r in _LETTER_RUNS if first <= r[0] <= last] for first, last in ETHIOPIC_RANGES)
)
_LETTERS = frozenset(chr(cp) for lo, hi in _LETTER_RUNS for cp in range(lo, hi + 1))


def is_ethiopic_letter(ch: str) -> bool:
    """True for one Ethiopic syllable (a letter the model reads), False otherwise."""
    return ch in _LETTERS


def _build_homophone_table() -> dict[int, int]:
    table: dict[int, int] = {}

    def row(src: int, dst: int, count: int) -> None:
        for i in range(count):
            table[src + i] = dst + i

    row(0x1210, 0x1200, 7)  # ሐ..ሖ -> ሀ..ሆ
    table[0x1217] = 0x128B  # ሗ -> ኋ
    row(0x1280, 0x1200, 8)  # ኀ..ኆ ኇ -> ሀ..ሆ ሇ
    row(0x1220, 0x1230, 8)  # ሠ..ሦ ሧ -> ሰ..ሶ ሷ
    row(0x12D0, 0x12A0, 7)  # ዐ..ዖ -> አ..ኦ
    row(0x1340, 0x1338, 7)  # ፀ..ፆ -> ጸ..ጾ
    # After h and the glottal stop, 1st-order ä is said as a: ሀ/ሃ and አ/ኣ sound the same and
    # writers mix them (ሀገር/ሃገር, አመት/ዓመት), so the 4th order of these rows folds to the 1st.
    for fourth, first in ((0x1203, 0x1200), (0x1213, 0x1200), (0x1283, 0x1200), (0x12A3, 0x12A0), (0x12D3, 0x12A0)):
        table[fourth] = first  # ሃ ሓ ኃ -> ሀ, ኣ ዓ -> አ
    return table


#: ``str.translate`` table for homophone folding (see the module docstring).
HOMOPHONE_TABLE: dict[int, int] = _build_homophone_table()


def fold_homophones(text: str) -> str:
    """Fold homophone letters (ሐ/ኀ -> ሀ, ሠ -> ሰ, ዐ -> አ, ፀ -> ጸ, each order kept; ሃ -> ሀ, ኣ -> አ)."""
    return text.translate(HOMOPHONE_TABLE)


def apart_from_digits(replacement: str, m: re.Match[str]) -> str:
    """``replacement`` for match ``m``, with a space on each side where a digit touches it.

    Expanded words must not glue onto neighbouring digits ("5ዓ.ም" -> "5 ዓመተ ምሕረት"), or the
    number reader would take them for one token.
    """
    string, start, end = m.string, m.start(), m.end()
    if start and string[start - 1].isdigit():
        replacement = " " + replacement
    if end < len(string) and string[end].isdigit():
        replacement += " "
    return replacement
