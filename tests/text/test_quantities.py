"""Fractions, times of day and dotted unit abbreviations read as Amharic words (issue 51).

Before: ``1/2 ኩባያ`` was read "one two cup", ``ኪ.ግ``, ``ሚ.ሜ`` and ``ሴ.ሜ`` were left as ``ኪ. ግ`` (``ኪ.ሜ`` alone
was expanded), and ``8:30`` kept its colon. The Amharic forms and their sources are in
xtts_ft/text/quantities.py and xtts_ft/text/abbreviations.py.
"""

from __future__ import annotations

import pytest

from xtts_ft.text import normalize_text
from xtts_ft.text.quantities import fraction_to_amharic, time_to_amharic


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1/2 ኩባያ ስኳር", "ግማሽ ኩባያ ስኳር"),  # the fractional of two is its own word
        ("3/4 ሊትር ወተት", "ሶስት አራተኛ ሊትር ወተት"),  # the general form: parts, then the ordinal
        ("1/3 ኩባያ", "አንድ ሶስተኛ ኩባያ"),
        ("1 1/2 ኩባያ ዱቄት", "አንድ ከግማሽ ኩባያ ዱቄት"),  # a whole and its part, joined by ከ
        ("በ1/2 ዋጋ", "በግማሽ ዋጋ"),
        ("24/7", "ሃያ አራት ሰባት"),  # not a proper fraction: two numbers, as before
        ("12/05/2015", "አስራ ሁለት ዜሮ አምስት ሁለት ሺህ አስራ አምስት"),  # a date is not a fraction
        ("5 ኪ.ግ ስኳር", "አምስት ኪሎ ግራም ስኳር"),
        ("10 ሚ.ሜ ዝናብ", "አስር ሚሊ ሜትር ዝናብ"),
        ("20 ሴ.ሜ ቁመት", "ሃያ ሴንቲ ሜትር ቁመት"),
        ("15 ኪ.ሜ ሮጠ", "አስራ አምስት ኪሎ ሜትር ሮጠ"),
        ("2 1/2 ኪ.ግ", "ሁለት ከግማሽ ኪሎ ግራም"),
        ("ስብሰባው 8:30 ይጀምራል።", "ስብሰባው ስምንት ሰዓት ከግማሽ ይጀምራል."),
        ("በ8:30 ሰዓት", "በስምንት ሰዓት ከግማሽ"),  # the following ሰዓት is said once
        ("ከቀኑ 2:15 ላይ", "ከቀኑ ሁለት ሰዓት ከአስራ አምስት ደቂቃ ላይ"),
        ("ከ8:00 እስከ 10:45", "ከስምንት ሰዓት እስከ አስር ሰዓት ከአርባ አምስት ደቂቃ"),
        ("ዘፍጥረት 1:1", "ዘፍጥረት አንድ: አንድ"),  # one-digit minutes: not a time
    ],
)
def test_fractions_times_and_units_are_read_as_words(text: str, expected: str) -> None:
    result = normalize_text(text, fold_homophones=False)
    assert result.text == expected and set(result.dropped) <= {"/"}  # a slash that is no fraction is counted
    assert normalize_text(result.text, fold_homophones=False).text == result.text  # and stay so


def test_the_readings_themselves() -> None:
    assert [fraction_to_amharic(n, d) for n, d in ((1, 2), (2, 3), (9, 10), (2, 2), (3, 2), (1, 16))] == [
        "ግማሽ", "ሁለት ሶስተኛ", "ዘጠኝ አስረኛ", None, None, None]
    assert [time_to_amharic(h, m) for h, m in ((8, 0), (8, 30), (12, 5))] == [
        "ስምንት ሰዓት", "ስምንት ሰዓት ከግማሽ", "አስራ ሁለት ሰዓት ከአምስት ደቂቃ"]
