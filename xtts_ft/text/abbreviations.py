"""Common Amharic abbreviations and their spoken forms.

Amharic abbreviates with a slash (ዶ/ር) or dots (ዓ.ም). Runs before punctuation mapping, so
each separator in the table also matches ``.`` ``/`` ``፡`` ``·`` and ``•`` (ዓ.ም, ዓ/ም, ዓ፡ም are
one abbreviation). No space is allowed after a separator and ``:`` is not one: normalised
text always has a space after ``.`` and ``:``, so it never matches again (idempotence);
the price is that a spaced ``ዓ. ም`` is not recognised.

Where an abbreviation may be read:

* after a space, the start of the text, a non-letter, or one of the proclitics በ ለ ከ የ
  (በዶ/ር -> በዶክተር); a digit just before it is parted by a space (2015ዓ.ም);
* ``closed`` entries must not be followed by an Ethiopic letter; a trailing ``.`` or ``፡``
  (ዓ.ም.) is swallowed only when the sentence clearly goes on (a letter or digit follows);
  otherwise it stays as the full stop;
* ``open`` entries stand for the start of a word and keep its rest: ት/ቤቱ -> ትምህርት ቤቱ,
  ገ/ሚካኤል -> ገብረሚካኤል (name prefixes are written as one word);
* ``number`` entries (ቁ.) only before a number.

Only expansions whose meaning is certain are listed. Note that እ.ኤ.አ is "እንደ ኤውሮፓውያን
አቆጣጠር" (by the European, i.e. Gregorian, calendar): the letters are the initials.
"""

from __future__ import annotations

import re

from .script import ETHIOPIC_LETTER_SPAN, apart_from_digits

CLOSED, OPEN, NUMBER = "closed", "open", "number"

#: (written form, spoken form, kind). Written forms use "." or "/" as separators.
ABBREVIATIONS: tuple[tuple[str, str, str], ...] = (
    # calendar
    ("ዓ.ም", "ዓመተ ምሕረት", CLOSED),
    ("ዓ.ዓ", "ዓመተ ዓለም", CLOSED),
    ("እ.ኤ.አ", "እንደ ኤውሮፓውያን አቆጣጠር", CLOSED),
    ("እ.አ.አ", "እንደ አውሮፓውያን አቆጣጠር", CLOSED),
    ("እአአ", "እንደ አውሮፓውያን አቆጣጠር", CLOSED),  # BBC Amharic style, no dots
    # titles
    ("ዶ/ር", "ዶክተር", CLOSED),
    ("ፕ/ር", "ፕሮፌሰር", CLOSED),
    ("ኢ/ር", "ኢንጂነር", CLOSED),
    ("ወ/ሮ", "ወይዘሮ", CLOSED),
    ("ወ/ሪት", "ወይዘሪት", CLOSED),
    ("ወ/ት", "ወይዘሪት", CLOSED),
    ("ም/ጠ/ሚ", "ምክትል ጠቅላይ ሚኒስትር", CLOSED),
    ("ጠ/ሚ/ር", "ጠቅላይ ሚኒስትር", CLOSED),
    ("ጠ/ሚ", "ጠቅላይ ሚኒስትር", CLOSED),
    ("ሚ/ር", "ሚኒስትር", CLOSED),
    ("ኮ/ል", "ኮሎኔል", CLOSED),
    ("ጄ/ል", "ጄኔራል", CLOSED),
    # institutions and places; "ቤ" forms keep the suffix: ቤት, ቤቱ, ቤቶች
    ("ት/ቤ", "ትምህርት ቤ", OPEN),
    ("መ/ቤ", "መሥሪያ ቤ", OPEN),
    ("ፍ/ቤ", "ፍርድ ቤ", OPEN),
    ("ም/ቤ", "ምክር ቤ", OPEN),
    ("ጽ/ቤ", "ጽሕፈት ቤ", OPEN),
    ("ቤ/ክርስቲያን", "ቤተ ክርስቲያን", CLOSED),
    ("ቤ/ክ", "ቤተ ክርስቲያን", CLOSED),
    ("አ.አ", "አዲስ አበባ", CLOSED),
    ("ኃ/የተ/የግ/ማ", "ኃላፊነቱ የተወሰነ የግል ማኅበር", CLOSED),  # before the ኃ/ name prefix
    # units, references. Spoken forms as Amharic text writes them: ኪሎ ግራም
    # (https://officeessence.net/am/massconversions/imperial-to-metrics), ሚሊ ሜትር (Amharic Wikipedia, ሜትር:
    # https://am.wikipedia.org/wiki/ሜትር), ሴ.ሜ for ሴንቲሜትር ("ለምሳሌ 3 ሴ.ሜ",
    # https://am.answers-science.com/14048879-what-are-all-the-metric-units-of-length); two words, as ኪሎ ሜትር
    ("ኪ.ሜ", "ኪሎ ሜትር", CLOSED),
    ("ኪ.ግ", "ኪሎ ግራም", CLOSED),
    ("ሚ.ሜ", "ሚሊ ሜትር", CLOSED),
    ("ሴ.ሜ", "ሴንቲ ሜትር", CLOSED),
    ("ወ.ዘ.ተ", "ወዘተ", CLOSED),
    ("ቁ.", "ቁጥር", NUMBER),
    ("ተ/ቁ", "ተራ ቁጥር", CLOSED),  # before the ተ/ name prefix
    # name prefixes (ገ/ሚካኤል, ወ/ማርያም, ኃ/ሥላሴ, ተ/ሃይማኖት)
    ("ገ/", "ገብረ", OPEN),
    ("ወ/", "ወልደ", OPEN),
    ("ኃ/", "ኃይለ", OPEN),
    ("ተ/", "ተክለ", OPEN),
)

_L = f"[{ETHIOPIC_LETTER_SPAN}]"
_SEP = "[./፡·•]"
_PROCLITICS = "በለከየ"


def _written_pattern(written: str) -> str:
    out = []
    for ch in written:
        if ch in "./":
            out.append(_SEP)
        elif ch == "ዓ":
            out.append("[ዓዐ]")  # ዐ.ም is a common variant spelling
        else:
            out.append(re.escape(ch))
    return "".join(out)


def _build() -> tuple[re.Pattern[str], list[str]]:
    alternatives: list[str] = []
    spoken: list[str] = []
    # Longest written form first, so ወ/ሮ wins over ወ/ and ጠ/ሚ/ር over ጠ/ሚ.
    for written, expansion, kind in sorted(ABBREVIATIONS, key=lambda entry: -len(entry[0])):
        if kind == CLOSED:
            tail = rf"(?!{_L})(?:[.፡](?=[ ]?(?:{_L}|[0-9])))?"
        elif kind == OPEN:
            tail = rf"(?={_L})"
        else:
            tail = r"(?=[ ]?[0-9])"
        alternatives.append(f"(?P<a{len(spoken)}>{_written_pattern(written)}{tail})")
        spoken.append(expansion)
    pattern = rf"(?<!{_L})(?P<pre>[{_PROCLITICS}])?(?:{'|'.join(alternatives)})"
    return re.compile(pattern), spoken


ABBREVIATION_RE, _SPOKEN = _build()
# Cheap test first: a first letter of some abbreviation followed by a separator, or እአአ.
_HINT_RE = re.compile(
    "[" + "".join(sorted({w[0] for w, _, _ in ABBREVIATIONS} | {"ዐ"})) + "]" + _SEP + "|እአአ"
)


def _sub(m: re.Match[str]) -> str:
    alternative = m.lastgroup or ""  # "a<i>": a match is one alternative, and its group closes last
    return apart_from_digits((m.group("pre") or "") + _SPOKEN[int(alternative[1:])], m)


def expand_abbreviations(text: str) -> str:
    """Replace the abbreviations in :data:`ABBREVIATIONS` with their spoken forms."""
    # Only try the full pattern where a hint says an abbreviation may start (at the hint, or one
    # letter earlier for a proclitic): ABBREVIATION_RE.sub would try it at every position.
    out: list[str] = []
    pos = 0
    for hint in _HINT_RE.finditer(text):
        start = hint.start()
        if start < pos:
            continue
        m = None
        if start > pos and text[start - 1] in _PROCLITICS:
            m = ABBREVIATION_RE.match(text, start - 1)
        if m is None:
            m = ABBREVIATION_RE.match(text, start)
        if m is not None:
            out.append(text[pos : m.start()])
            out.append(_sub(m))
            pos = m.end()
    if not out:
        return text
    out.append(text[pos:])
    return "".join(out)
