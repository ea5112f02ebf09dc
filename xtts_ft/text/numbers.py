"""Numbers to Amharic words: cardinals, ordinals, decimals, money, percentages, Ge'ez numerals.

Our own converter (num2words' Amharic output is wrong). Conventions chosen here:

* Cardinals: ``0`` ዜሮ; units አንድ ... ዘጠኝ; ``10`` አስር; teens አስራ + unit (``11`` አስራ አንድ);
  tens ሃያ ሰላሳ አርባ ሃምሳ ስልሳ ሰባ ሰማንያ ዘጠና; ``100`` መቶ (no "one"), ``200`` ሁለት መቶ;
  scales ሺህ (10^3), ሚሊዮን (10^6), ቢሊዮን (10^9), ትሪሊዮን (10^12), always with a count:
  ``1000`` አንድ ሺህ, ``100000`` መቶ ሺህ. Above 10^15 the trillions count is itself read as a
  number (``10**15`` አንድ ሺህ ትሪሊዮን); :func:`expand_numbers` reads such long digit strings
  digit by digit instead.
* Negative sign: ሲቀነስ ("minus"), e.g. ``-5`` ሲቀነስ አምስት.
* Decimals: integer part, ነጥብ, then the fraction digit by digit: ``2.05`` ሁለት ነጥብ ዜሮ አምስት.
* Ordinals (digits + ኛ): the last word takes the ordinal form: ``1ኛ`` አንደኛ, ``16ኛ`` አስራ
  ስድስተኛ, ``20ኛ`` ሃያኛ, ``100ኛ`` መቶኛ. A suffix after ኛ stays attached (``1ኛው`` አንደኛው).
* Percent: ``25%`` ሃያ አምስት በመቶ.
* Money: ``50 ብር`` / ``ብር 50`` / ``50 ETB`` -> ሃምሳ ብር; ``5.50 ብር`` -> አምስት ብር ከሃምሳ ሳንቲም;
  ``ብር 2.5 ሚሊዮን`` -> ሁለት ነጥብ አምስት ሚሊዮን ብር; ``$``, ``€``, ``£`` -> ዶላር, ዩሮ, ፓውንድ.
* Digit strings with a leading zero (``0911``) or of 16+ digits are read digit by digit.
* Group separators: ``1,000,000`` and ``1 000 000`` (single spaces, groups of exactly three).
"""

from __future__ import annotations

import re

from .script import ETHIOPIC_LETTER_SPAN, apart_from_digits

ZERO = "ዜሮ"
UNITS = ("", "አንድ", "ሁለት", "ሶስት", "አራት", "አምስት", "ስድስት", "ሰባት", "ስምንት", "ዘጠኝ")
TENS = ("", "አስር", "ሃያ", "ሰላሳ", "አርባ", "ሃምሳ", "ስልሳ", "ሰባ", "ሰማንያ", "ዘጠና")
TEEN_PREFIX = "አስራ"
HUNDRED = "መቶ"
SCALES = ((10**12, "ትሪሊዮን"), (10**9, "ቢሊዮን"), (10**6, "ሚሊዮን"), (10**3, "ሺህ"))
MINUS = "ሲቀነስ"
POINT = "ነጥብ"
PERCENT = "በመቶ"
CENTS = "ሳንቲም"
DIGIT_WORDS = (ZERO,) + UNITS[1:]

#: Longest digit string read as one number; longer ones are read digit by digit.
MAX_CARDINAL_DIGITS = 15


def _below_thousand(n: int) -> list[str]:
    words: list[str] = []
    hundreds, rest = divmod(n, 100)
    if hundreds:
        words.append(HUNDRED if hundreds == 1 else f"{UNITS[hundreds]} {HUNDRED}")
    if rest >= 20:
        tens, unit = divmod(rest, 10)
        words.append(TENS[tens])
        if unit:
            words.append(UNITS[unit])
    elif rest > 10:
        words.append(f"{TEEN_PREFIX} {UNITS[rest - 10]}")
    elif rest == 10:
        words.append(TENS[1])
    elif rest:
        words.append(UNITS[rest])
    return words


def _cardinal(n: int) -> list[str]:
    words: list[str] = []
    for scale, name in SCALES:
        count, n = divmod(n, scale)
        if count:
            words.extend(_cardinal(count) if count >= 1000 else _below_thousand(count))
            words.append(name)
    words.extend(_below_thousand(n))
    return words


def number_to_amharic(n: int) -> str:
    """Cardinal ``n`` in Amharic words: 1999 -> "አንድ ሺህ ዘጠኝ መቶ ዘጠና ዘጠኝ"."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"number_to_amharic expects an int, got {type(n).__name__}")
    if n < 0:
        return f"{MINUS} {number_to_amharic(-n)}"
    if n == 0:
        return ZERO
    return " ".join(_cardinal(n))


# 6th-order (vowelless) final consonant -> 1st order before ኛ: አንድ -> አንደኛ, ዘጠኝ -> ዘጠነኛ.
_ORDINAL_LAST_WORD = {
    "ዘጠኝ": "ዘጠነኛ",  # ኝ -> ነ, not ኘ
    "ሺህ": "ሺኛ",
    # loanwords just take ኛ
    "ሚሊዮን": "ሚሊዮንኛ",
    "ቢሊዮን": "ቢሊዮንኛ",
    "ትሪሊዮን": "ትሪሊዮንኛ",
}


def _ordinal_word(word: str) -> str:
    if word in _ORDINAL_LAST_WORD:
        return _ORDINAL_LAST_WORD[word]
    last = ord(word[-1])
    if 0x1200 <= last <= 0x1357 and (last - 0x1200) % 8 == 5:  # 6th order: ድ ት ኝ ር ን
        return word[:-1] + chr(last - 5) + "ኛ"
    return word + "ኛ"  # ends in a vowel: ሃያ -> ሃያኛ, መቶ -> መቶኛ, ዜሮ -> ዜሮኛ


def ordinal_to_amharic(n: int) -> str:
    """Ordinal ``n`` in Amharic words: 1 -> "አንደኛ", 16 -> "አስራ ስድስተኛ", 100 -> "መቶኛ"."""
    if n < 0:
        raise ValueError(f"no ordinal for a negative number: {n}")
    head, _, last = number_to_amharic(n).rpartition(" ")
    return f"{head} {_ordinal_word(last)}" if head else _ordinal_word(last)


def digits_to_amharic(digits: str) -> str:
    """Read a string of ASCII digits one by one: "0911" -> "ዜሮ ዘጠኝ አንድ አንድ"."""
    return " ".join(DIGIT_WORDS[int(d)] for d in digits)


def _integer_words(digits: str) -> str:
    if len(digits) > MAX_CARDINAL_DIGITS or (len(digits) > 1 and digits[0] == "0"):
        return digits_to_amharic(digits)
    return number_to_amharic(int(digits))


def decimal_to_amharic(integer: str, fraction: str) -> str:
    """"2", "5" -> "ሁለት ነጥብ አምስት"; the fraction is read digit by digit."""
    return f"{_integer_words(integer)} {POINT} {digits_to_amharic(fraction)}"


# --- Ge'ez (Ethiopic) numerals ---------------------------------------------------------------

_ETH_UNITS = {chr(0x1369 + i): i + 1 for i in range(9)}  # ፩..፱
_ETH_TENS = {chr(0x1372 + i): (i + 1) * 10 for i in range(9)}  # ፲..፺
_ETH_HUNDRED = "\u137b"  # ፻
_ETH_MYRIAD = "\u137c"  # ፼
ETHIOPIC_NUMERAL_RE = re.compile("[\u1369-\u137c]+")


def ethiopic_numeral_to_int(s: str) -> int:
    """Value of a Ge'ez numeral: "፲፱፻፹፯" -> 1987, "፻" -> 100, "፼" -> 10000, "፪፼" -> 20000.

    Not positional: ፻ multiplies what precedes it in its ten-thousand group (1 if nothing),
    ፼ multiplies everything before it (1 if nothing). Within a group below 100, at most one
    tens sign followed by at most one unit. Raises ValueError otherwise.
    """
    if not s:
        raise ValueError("empty Ethiopic numeral")
    total = group = small = 0  # total: above 10^4 ; group: below 10^4 ; small: below 100
    seen_ten = seen_unit = False
    for ch in s:
        if ch in _ETH_TENS:
            if seen_ten or seen_unit:
                raise ValueError(f"malformed Ethiopic numeral {s!r}: tens sign out of place")
            small += _ETH_TENS[ch]
            seen_ten = True
        elif ch in _ETH_UNITS:
            if seen_unit:
                raise ValueError(f"malformed Ethiopic numeral {s!r}: two unit signs in a row")
            small += _ETH_UNITS[ch]
            seen_unit = True
        elif ch == _ETH_HUNDRED:
            group = (group + (small or (0 if group else 1))) * 100
            small, seen_ten, seen_unit = 0, False, False
        elif ch == _ETH_MYRIAD:
            part = group + small
            total = (total + (part or (0 if total else 1))) * 10000
            group = small = 0
            seen_ten = seen_unit = False
        else:
            raise ValueError(f"not an Ethiopic numeral character: {ch!r} in {s!r}")
    return total + group + small


def _ethiopic_numeral_sub(m: re.Match[str]) -> str:
    s = m.group()
    try:
        out = str(ethiopic_numeral_to_int(s))
    except ValueError:  # malformed: read each sign on its own
        out = " ".join(str(ethiopic_numeral_to_int(ch)) for ch in s)
    return apart_from_digits(out, m)


def replace_ethiopic_numerals(text: str) -> str:
    """Rewrite Ge'ez numerals as ASCII digits ("፲፱፻፹፯" -> "1987") for :func:`expand_numbers`."""
    return ETHIOPIC_NUMERAL_RE.sub(_ethiopic_numeral_sub, text)


# --- numbers in running text -----------------------------------------------------------------

_CURRENCIES = {"ብር": "ብር", "etb": "ብር", "$": "ዶላር", "€": "ዩሮ", "£": "ፓውንድ"}
_CUR = r"(?:ብር|etb|\$|€|£)"
_L = f"[{ETHIOPIC_LETTER_SPAN}a-z]"  # a letter (text is lower-cased before we run)

NUMBER_RE = re.compile(
    rf"""
    (?:(?<!{_L})(?P<cur_pre>{_CUR})[ ]?)?               # ብር 50, $50
    (?P<neg>(?<![\w.,])-)?                               # -5 (not 1990-1995)
    (?P<int>[0-9]{{1,3}}(?:,[0-9]{{3}})+(?![0-9])          # 1,000,000
          |[0-9]{{1,3}}(?:[ ][0-9]{{3}})+(?![0-9])         # 1 000 000
          |[0-9]+)
    (?:\.(?P<frac>[0-9]+))?                              # 2.5
    (?:[ ](?P<scale>ሺህ|ሺ|ሚሊዮን|ቢሊዮን|ትሪሊዮን)(?!{_L}))?      # ብር 5 ሚሊዮን
    (?:(?P<pct>[ ]?%)                                    # 25%
      |(?P<ord>ኛ)                                        # 16ኛ
      |[ ]?(?P<cur_post>{_CUR})(?!{_L})                  # 50 ብር
    )?
    """,
    re.VERBOSE,
)
HAS_DIGIT_RE = re.compile("[0-9]")
_LONGEST_PREFIX = len("etb ")
_PREFIX_CHARS = frozenset("ብb$€£")  # ends of "ብር", "etb", "$" ... within 4 characters


def _money(integer: str, fraction: str | None, unit: str) -> str:
    if fraction is not None and len(fraction) <= 2:
        cents = int(fraction.ljust(2, "0"))  # 5.5 ብር is 5 birr 50 santim
        if cents and not integer.strip("0"):
            return f"{number_to_amharic(cents)} {CENTS}"
        if cents:
            return f"{_integer_words(integer)} {unit} ከ{number_to_amharic(cents)} {CENTS}"
        return f"{_integer_words(integer)} {unit}"
    if fraction is not None:
        return f"{decimal_to_amharic(integer, fraction)} {unit}"
    return f"{_integer_words(integer)} {unit}"


def _number_sub(m: re.Match[str]) -> str:
    integer = m.group("int").replace(",", "").replace(" ", "")
    fraction, scale = m.group("frac"), m.group("scale")
    cur_pre, cur_post = m.group("cur_pre"), m.group("cur_post")
    ordinal, percent = m.group("ord"), m.group("pct")
    unit = _CURRENCIES[cur_post or cur_pre] if (cur_post or cur_pre) else None
    if unit and not (scale or ordinal or percent):
        words = _money(integer, fraction, unit)
    else:
        words = decimal_to_amharic(integer, fraction) if fraction is not None else _integer_words(integer)
        if scale:
            words += " " + scale
        if ordinal:
            head, _, last = words.rpartition(" ")
            words = f"{head} {_ordinal_word(last)}" if head else _ordinal_word(last)
        elif percent:
            words += " " + PERCENT
        if unit and (ordinal or percent):
            words = f"{unit} {words}"  # "ብር 5ኛ": not an amount, keep the order
        elif unit:
            words += " " + unit  # ብር 2.5 ሚሊዮን -> ሁለት ነጥብ አምስት ሚሊዮን ብር
    if m.group("neg"):
        words = f"{MINUS} {words}"
    # Keep Ethiopic affixes glued (በ2014 -> በሁለት ..., 2014ን -> ...አራትን); part Latin ones.
    string, start, end = m.string, m.start(), m.end()
    if start and string[start - 1].isascii() and string[start - 1].isalnum():
        words = " " + words
    if end < len(string):
        following = string[end]
        if following.isascii() and following.isalnum():
            words += " "
        elif "\u1270" <= following <= "\u1277" and words.endswith("ት"):
            words = words[:-1]  # 3ቱ -> ሶስቱ, 2ቱም -> ሁለቱም: the ት merges with the suffix
    return words


def expand_numbers(text: str) -> str:
    """Replace every ASCII digit string in (lower-cased) ``text`` with Amharic words."""
    # NUMBER_RE.sub would try the whole pattern at every position (its optional prefixes defeat
    # the regex engine's first-character scan); start it just before each digit instead.
    out: list[str] = []
    pos = 0
    while (digit := HAS_DIGIT_RE.search(text, pos)) is not None:
        start = digit.start()
        if start > pos and text[start - 1] == "-":
            start -= 1
        lead = max(pos, start - _LONGEST_PREFIX)
        if any(c in _PREFIX_CHARS for c in text[lead:start]):  # a currency may come first
            start = lead
        m = NUMBER_RE.search(text, start)
        assert m is not None  # the digit itself always matches
        out.append(text[pos : m.start()])
        out.append(_number_sub(m))
        pos = m.end()
    if not out:
        return text
    out.append(text[pos:])
    return "".join(out)
