"""Amharic number reading: cardinals, ordinals, decimals, money, percent, Ge'ez numerals."""

from __future__ import annotations

import pytest

from xtts_ft.text import ethiopic_numeral_to_int, normalize_text, number_to_amharic, ordinal_to_amharic
from xtts_ft.text.numbers import digits_to_amharic, expand_numbers, replace_ethiopic_numerals


@pytest.mark.parametrize(
    ("n", "words"),
    [
        (0, "ዜሮ"),
        (1, "አንድ"),
        (3, "ሶስት"),
        (9, "ዘጠኝ"),
        (10, "አስር"),
        (11, "አስራ አንድ"),
        (15, "አስራ አምስት"),
        (19, "አስራ ዘጠኝ"),
        (20, "ሃያ"),
        (21, "ሃያ አንድ"),
        (30, "ሰላሳ"),
        (40, "አርባ"),
        (50, "ሃምሳ"),
        (60, "ስልሳ"),
        (70, "ሰባ"),
        (80, "ሰማንያ"),
        (99, "ዘጠና ዘጠኝ"),
        (100, "መቶ"),
        (101, "መቶ አንድ"),
        (110, "መቶ አስር"),
        (200, "ሁለት መቶ"),
        (999, "ዘጠኝ መቶ ዘጠና ዘጠኝ"),
        (1000, "አንድ ሺህ"),
        (1001, "አንድ ሺህ አንድ"),
        (1999, "አንድ ሺህ ዘጠኝ መቶ ዘጠና ዘጠኝ"),
        (2015, "ሁለት ሺህ አስራ አምስት"),
        (100_000, "መቶ ሺህ"),
        (101_000, "መቶ አንድ ሺህ"),
        (10**6, "አንድ ሚሊዮን"),
        (2_500_000, "ሁለት ሚሊዮን አምስት መቶ ሺህ"),
        (10**9, "አንድ ቢሊዮን"),
        (10**12, "አንድ ትሪሊዮን"),
        (
            123_456_789_012,
            "መቶ ሃያ ሶስት ቢሊዮን አራት መቶ ሃምሳ ስድስት ሚሊዮን ሰባት መቶ ሰማንያ ዘጠኝ ሺህ አስራ ሁለት",
        ),
        (999_999_999_999_999, "ዘጠኝ መቶ ዘጠና ዘጠኝ ትሪሊዮን ዘጠኝ መቶ ዘጠና ዘጠኝ ቢሊዮን "
         "ዘጠኝ መቶ ዘጠና ዘጠኝ ሚሊዮን ዘጠኝ መቶ ዘጠና ዘጠኝ ሺህ ዘጠኝ መቶ ዘጠና ዘጠኝ"),
        (10**15, "አንድ ሺህ ትሪሊዮን"),
        (-5, "ሲቀነስ አምስት"),
    ],
)
def test_cardinals(n: int, words: str) -> None:
    assert number_to_amharic(n) == words


def test_cardinal_rejects_non_int() -> None:
    with pytest.raises(TypeError):
        number_to_amharic(2.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        number_to_amharic(True)


@pytest.mark.parametrize(
    ("n", "words"),
    [
        (1, "አንደኛ"),
        (2, "ሁለተኛ"),
        (3, "ሶስተኛ"),
        (4, "አራተኛ"),
        (5, "አምስተኛ"),
        (6, "ስድስተኛ"),
        (7, "ሰባተኛ"),
        (8, "ስምንተኛ"),
        (9, "ዘጠነኛ"),
        (10, "አስረኛ"),
        (16, "አስራ ስድስተኛ"),
        (20, "ሃያኛ"),
        (21, "ሃያ አንደኛ"),
        (100, "መቶኛ"),
        (1000, "አንድ ሺኛ"),
        (10**6, "አንድ ሚሊዮንኛ"),
    ],
)
def test_ordinals(n: int, words: str) -> None:
    assert ordinal_to_amharic(n) == words


@pytest.mark.parametrize(
    ("numeral", "value"),
    [
        ("፩", 1),
        ("፱", 9),
        ("፲", 10),
        ("፲፱", 19),
        ("፺፱", 99),
        ("፻", 100),
        ("፻፩", 101),
        ("፪፻", 200),
        ("፲፱፻፹፯", 1987),
        ("፳፻፲፭", 2015),
        ("፼", 10_000),
        ("፪፼", 20_000),
        ("፩፼፻", 10_100),
        ("፻፼", 1_000_000),
        ("፼፼", 100_000_000),
        ("፩፼፳፫፻፵፭፼፷፯፻፹፱", 123_456_789),
    ],
)
def test_ethiopic_numerals(numeral: str, value: int) -> None:
    assert ethiopic_numeral_to_int(numeral) == value


@pytest.mark.parametrize("bad", ["", "፩፲", "፩፪", "፲፳", "፲a"])
def test_malformed_ethiopic_numerals_raise(bad: str) -> None:
    with pytest.raises(ValueError):
        ethiopic_numeral_to_int(bad)


def test_malformed_ethiopic_numeral_in_text_is_read_sign_by_sign() -> None:
    assert replace_ethiopic_numerals("፩፪") == "1 2"


def test_digits_to_amharic() -> None:
    assert digits_to_amharic("0911") == "ዜሮ ዘጠኝ አንድ አንድ"


@pytest.mark.parametrize(
    ("text", "spoken"),
    [
        # group separators
        ("1,000,000 ሰዎች", "አንድ ሚሊዮን ሰዎች"),
        ("1 000 000 ሰዎች", "አንድ ሚሊዮን ሰዎች"),
        ("12,500", "አስራ ሁለት ሺህ አምስት መቶ"),
        # decimals and negatives
        ("2.5", "ሁለት ነጥብ አምስት"),
        ("2.05", "ሁለት ነጥብ ዜሮ አምስት"),
        ("0.5", "ዜሮ ነጥብ አምስት"),
        ("-5 ዲግሪ", "ሲቀነስ አምስት ዲግሪ"),
        ("ከ -3.5", "ከ ሲቀነስ ሶስት ነጥብ አምስት"),
        ("1990-1995", "አንድ ሺህ ዘጠኝ መቶ ዘጠና-አንድ ሺህ ዘጠኝ መቶ ዘጠና አምስት"),
        # percentages
        ("25%", "ሃያ አምስት በመቶ"),
        ("25 %", "ሃያ አምስት በመቶ"),
        ("2.5%", "ሁለት ነጥብ አምስት በመቶ"),
        # ordinals, with a suffix after ኛ
        ("16ኛ", "አስራ ስድስተኛ"),
        ("1ኛው", "አንደኛው"),
        ("100ኛ", "መቶኛ"),
        # money
        ("50 ብር", "ሃምሳ ብር"),
        ("ብር 50", "ሃምሳ ብር"),
        ("50ብር", "ሃምሳ ብር"),
        ("5.50 ብር", "አምስት ብር ከሃምሳ ሳንቲም"),
        ("ብር 5.50", "አምስት ብር ከሃምሳ ሳንቲም"),
        ("5.5 ብር", "አምስት ብር ከሃምሳ ሳንቲም"),
        ("0.25 ብር", "ሃያ አምስት ሳንቲም"),
        ("5.00 ብር", "አምስት ብር"),
        ("1,500 etb", "አንድ ሺህ አምስት መቶ ብር"),
        ("$20", "ሃያ ዶላር"),
        ("ብር 5 ሚሊዮን", "አምስት ሚሊዮን ብር"),
        ("ብር 2.5 ቢሊዮን", "ሁለት ነጥብ አምስት ቢሊዮን ብር"),
        ("5 ሺ ብር", "አምስት ሺ ብር"),
        ("3 ሚሊዮን ሰዎች", "ሶስት ሚሊዮን ሰዎች"),
        ("-50 ብር", "ሲቀነስ ሃምሳ ብር"),
        ("50 ብርቱካን", "ሃምሳ ብርቱካን"),  # ብርቱካን (orange) is not the currency
        # glued to Ethiopic affixes, parted from Latin
        ("በ2014", "በሁለት ሺህ አስራ አራት"),
        ("2014ን", "ሁለት ሺህ አስራ አራትን"),
        ("covid19", "covid አስራ ዘጠኝ"),
        # digit by digit
        ("0911", "ዜሮ ዘጠኝ አንድ አንድ"),
        ("1234567890123456", "አንድ ሁለት ሶስት አራት አምስት ስድስት ሰባት ስምንት ዘጠኝ ዜሮ "
         "አንድ ሁለት ሶስት አራት አምስት ስድስት"),
        ("999999999999999", number_to_amharic(999_999_999_999_999)),
    ],
)
def test_expand_numbers(text: str, spoken: str) -> None:
    assert expand_numbers(text) == spoken


@pytest.mark.parametrize(
    ("text", "spoken"),
    [
        ("በ2015 ዓ.ም ተወለደ።", "በሁለት ሺህ አስራ አምስት ዓመተ ምሕረት ተወለደ."),
        ("በ1999ዓ.ም.", "በአንድ ሺህ ዘጠኝ መቶ ዘጠና ዘጠኝ ዓመተ ምሕረት."),
        ("500 ዓ.ዓ", "አምስት መቶ ዓመተ ዓለም"),
        ("2016 ዓመተ ምሕረት", "ሁለት ሺህ አስራ ስድስት ዓመተ ምሕረት"),
        ("፲፱፻፹፯ ዓ.ም", "አንድ ሺህ ዘጠኝ መቶ ሰማንያ ሰባት ዓመተ ምሕረት"),
        ("፼ ሰዎች", "አስር ሺህ ሰዎች"),
        ("፪፼ ብር", "ሃያ ሺህ ብር"),
        ("፭ኛ ክፍል", "አምስተኛ ክፍል"),
        ("ዋጋው 1,250.75 ብር ነው።", "ዋጋው አንድ ሺህ ሁለት መቶ ሃምሳ ብር ከሰባ አምስት ሳንቲም ነው."),
        ("ከ10 ተማሪዎች 3ቱ", "ከአስር ተማሪዎች ሶስቱ"),
        ("2ቱም መጡ", "ሁለቱም መጡ"),
        ("ስልክ፡ 0911234567", "ስልክ ዜሮ ዘጠኝ አንድ አንድ ሁለት ሶስት አራት አምስት ስድስት ሰባት"),
        ("٢٠١٥", "ሁለት ሺህ አስራ አምስት"),  # Arabic-Indic digits
        ("ETB 10", "አስር ብር"),
    ],
)
def test_numbers_through_normalize_text(text: str, spoken: str) -> None:
    result = normalize_text(text, fold_homophones=False)
    assert result.text == spoken
    assert not result.dropped
