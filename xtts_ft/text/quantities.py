"""Fractions and times of day in Amharic words: read as one quantity each, before the other numbers.

Without this step ``1/2 ኩባያ`` was read as two numbers ("one two cup") and ``8:30`` kept its colon
("eight: thirty"). Conventions, and where the Amharic usage was checked (2026-12):

* Fractions: ``1/2`` is ግማሽ (Wiktionary lists ግማሽ as the fractional of ሁለት "two", after Leslau,
  *Reference Grammar of Amharic*, 1995, p. 52: https://en.wiktionary.org/wiki/ሁለተኛ). Any other proper
  fraction with a denominator up to :data:`MAX_DENOMINATOR` is read as the count of parts and the
  ordinal of the denominator, ``3/4`` ሶስት አራተኛ, ``1/3`` አንድ ሶስተኛ (ordinal forms as in
  https://easyamharic.com/courses/amharic-conversations/lessons/ordinal-numbers-in-amharic; the
  composition is this project's reading of the ordinal as "the N-th part", not quoted from a grammar).
  A whole number before it is joined with ከ, as time is: ``1 1/2`` አንድ ከግማሽ.
  Anything else with a slash (``24/7``, dates such as ``12/05/2015``, ``5/3``) is left to the number
  reader, as before.
* Times of day: ``H:MM`` is "H ሰዓት", then ከ and the minutes: ``8:30`` ስምንት ሰዓት ከግማሽ (the hour,
  ሰዓት, then ከ and the part: "4:30 ... አራት ሰዓት ከግማሽ",
  https://sublearn.com/ar/learn/am/phrases/ግማሽ-ሰዓት), ``8:15`` ስምንት ሰዓት ከአስራ አምስት ደቂቃ, ``8:00``
  ስምንት ሰዓት. The digits are read as written: whether they count from dawn (the Ethiopian clock) or
  from midnight is the writer's, and is not converted. A following ሰዓት is the same word, said once.
  Every ``H:MM`` with an hour up to 24 and two-digit minutes is read so: a chapter and verse written
  the same way (ዮሐንስ 3:16) is read as a time too, a known limit (``1:1``, with one-digit minutes, is not).
"""

from __future__ import annotations

import re
from typing import Optional

from .numbers import number_to_amharic, ordinal_to_amharic
from .script import ETHIOPIC_LETTER_SPAN

HALF = "ግማሽ"
HOUR = "ሰዓት"
MINUTES = "ደቂቃ"
AND = "ከ"  # "and" of a whole and its part: 1 1/2 አንድ ከግማሽ, 4:30 አራት ሰዓት ከግማሽ
MAX_DENOMINATOR = 10  # 1/16 or 7/100 in running text are rare and read as two numbers

_L = f"[{ETHIOPIC_LETTER_SPAN}a-z]"
FRACTION_RE = re.compile(r"(?<![0-9/.,:])(?:(?P<whole>[0-9]{1,3}) )?(?P<num>[0-9]{1,2})/(?P<den>[0-9]{1,2})(?![0-9/])")
# A proclitic may sit on the digits (በ8:30); a following ሰዓት is taken in (it is said once).
TIME_RE = re.compile(rf"(?<![0-9:./{ETHIOPIC_LETTER_SPAN}a-z])(?P<clitic>እስከ|[በከለ])?"
                     rf"(?P<hour>[0-9]{{1,2}}):(?P<minute>[0-5][0-9])(?![0-9:])(?P<said>[ ]{HOUR}(?!{_L}))?")


def fraction_to_amharic(numerator: int, denominator: int) -> Optional[str]:
    """A proper fraction in words (``1/2`` ግማሽ, ``3/4`` ሶስት አራተኛ); None for what is read otherwise."""
    if not 1 <= numerator < denominator <= MAX_DENOMINATOR:
        return None
    if (numerator, denominator) == (1, 2):
        return HALF
    return f"{number_to_amharic(numerator)} {ordinal_to_amharic(denominator)}"


def time_to_amharic(hour: int, minute: int) -> str:
    """``8:30`` -> ስምንት ሰዓት ከግማሽ, ``8:15`` -> ስምንት ሰዓት ከአስራ አምስት ደቂቃ, ``8:00`` -> ስምንት ሰዓት."""
    words = f"{number_to_amharic(hour)} {HOUR}"
    if minute == 30:
        return f"{words} {AND}{HALF}"
    return f"{words} {AND}{number_to_amharic(minute)} {MINUTES}" if minute else words


def _fraction_sub(m: re.Match[str]) -> str:
    words = fraction_to_amharic(int(m.group("num")), int(m.group("den")))
    if words is None:
        return m.group()
    if m.group("whole") is not None:
        words = f"{number_to_amharic(int(m.group('whole')))} {AND}{words}"
    return words


def _time_sub(m: re.Match[str]) -> str:
    hour, minute = int(m.group("hour")), int(m.group("minute"))
    if hour > 24:
        return m.group()
    return (m.group("clitic") or "") + time_to_amharic(hour, minute)


def expand_fractions_and_times(text: str) -> str:
    """Read the fractions and times of day in (lower-cased) ``text`` as words; other digits are left as they are."""
    if "/" in text:
        text = FRACTION_RE.sub(_fraction_sub, text)
    if ":" in text:
        text = TIME_RE.sub(_time_sub, text)
    return text
