"""Normalise Amharic text into what the model reads.

Output alphabet (a small closed set):

* Ethiopic letters (syllables of the Ethiopic blocks), Latin ``a-z`` (lower case), single spaces;
* ``. , ; : ? !`` pause and intonation marks, never preceded by a space and followed by one
  when a word follows; a run of marks (``!!``, ``...``, ``?!``, ``።።``) becomes its strongest
  mark, in the order ``? ! . ; : ,``;
* ``-`` only inside a word (ኮቪድ-አስራ ዘጠኝ, 1990-1995 read as numbers joined by ``-``); a free
  standing dash (``ሀ - ለ``, ``ሀ — ለ``) becomes ``,``;
* ``"`` for every quotation mark (« » “ ” „ ‘ ’ ‹ ›): paired quotes hug their content
  (``እሱ "ሰላም" አለ``), an empty pair is dropped; ``'`` only as an apostrophe between two Latin
  letters (``don't``).

Mapping (done in this order):

1. Unicode NFC; format characters (zero-width space/joiners, BOM, word joiner, soft hyphen,
   bidi controls) removed and counted in ``dropped``; other Unicode digits -> ASCII digits;
   quote, dash, percent and full-width punctuation variants unified; ``…`` -> ``.``.
2. Latin lower case (other scripts are counted as given); every kind of whitespace (NBSP,
   thin space, tabs, newlines) -> one space.
3. Abbreviations expanded (:mod:`.abbreviations`), then Ge'ez numerals, fractions and times of day
   (:mod:`.quantities`: ``1/2`` ግማሽ, ``8:30`` ስምንት ሰዓት ከግማሽ) and digit strings read as Amharic
   words (:mod:`.numbers`).
4. Ethiopic punctuation: ። -> ``.``, ፣ -> ``,``, ፤ -> ``;``, ፥ -> ``:`` (its name is
   "Ethiopic colon"), ፦ -> ``:``, ፧ -> ``?``, ፨ -> ``.``, ፡ (wordspace) -> space, but ``፡፡``
   and ASCII ``::`` (both written as a full stop) -> ``.``. Round and square brackets -> ``,``
   (a parenthesis is read with a pause); ``{ } < >`` are dropped.
5. Latin letters with diacritics folded to ASCII (é -> e, ß -> ss) where possible.
6. Everything else (emoji, symbols, other scripts, ``/ | * # { } < > _ ~ @ & + = %`` when not
   part of a number, Ethiopic section mark ፠, combining marks) is dropped and counted in
   ``dropped``; a dropped mark becomes a word break, a dropped combining mark nothing.
7. Optional homophone folding (:func:`.script.fold_homophones`).
8. Layout: dashes, punctuation runs and spacing, quotes; marks at the very start of the line
   are removed and counted. A line with no letter left becomes empty (its marks counted).

``dropped`` counts characters that have no counterpart in the output. Characters mapped to
another (Ethiopic punctuation, quotes, brackets, spaces) and marks merged into a neighbouring
mark are not "dropped". Empty or whitespace-only input gives ``NormalizedText("", Counter())``.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from .abbreviations import expand_abbreviations
from .numbers import ETHIOPIC_NUMERAL_RE, HAS_DIGIT_RE, expand_numbers, replace_ethiopic_numerals
from .quantities import expand_fractions_and_times
from .script import ETHIOPIC_LETTER_CLASS, HOMOPHONE_TABLE


@dataclass(frozen=True)
class NormalizedText:
    """A normalised line: ``text`` for the model, ``dropped`` what could not be kept."""

    text: str
    dropped: Counter[str] = field(default_factory=Counter)


#: Bumped whenever ``normalize_text`` gives a different output for some input. The pipeline's prepare
#: and tokenizer stages hash it, so an existing run re-normalises its transcripts and retrains its
#: vocabulary instead of reusing text made by an older front-end.
#: 2: homophone folding also folds the 4th order of the h and glottal-stop rows (ሃ -> ሀ, ኣ/ዓ -> አ).
#: 3: fractions (1/2 ግማሽ, 3/4 ሶስት አራተኛ), times of day (8:30) and the units ኪ.ግ, ሚ.ሜ, ሴ.ሜ read as words.
NORMALIZER_VERSION = 3

PUNCTUATION = ".,;:?!"
#: Strongest first: a run of marks collapses to the first of these it contains.
_STRENGTH = "?!.;:,"

# --- step 1: format characters and character variants -----------------------------------------

_FORMAT_RE = re.compile("[\u00ad\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff]")


def _early_table() -> dict[int, str]:
    table: dict[int, str] = {}
    for chars, target in (
        ("«»“”„‟″〝〞＂‹›", '"'),
        ("‘’‚‛ʼ′`´＇", "'"),
        ("‐‑‒–—―−﹣－⁃", "-"),
        ("٪％﹪", "%"),
        ("！", "!"),
        ("？؟", "?"),
        ("，،、", ","),
        ("。", "."),
        ("：", ":"),
        ("；؛", ";"),
        ("（", "("),
        ("）", ")"),
    ):
        for ch in chars:
            table[ord(ch)] = target
    table[ord("…")] = "."
    for c in range(ord("A"), ord("Z") + 1):  # other scripts keep their case: dropped as given
        table[c] = chr(c + 32)
    return table


_EARLY_TABLE = _early_table()
# Lines made only of Ethiopic letters and punctuation, ASCII and spaces skip step 1.
_RARE_RE = re.compile("[^\u1200-\u135a\u1361-\u1368 -~]")
_OTHER_DIGIT_RE = re.compile(r"(?![0-9])\d")  # Arabic-Indic, Devanagari, full-width ... digits


def _ascii_digit(m: re.Match[str]) -> str:
    return str(unicodedata.decimal(m.group()))


# --- step 4: punctuation -------------------------------------------------------------------

_DOUBLE_STOP_RE = re.compile("፡(?: ?፡)+|::+")
_PUNCT_MAP = (
    ("።", "."),
    ("፣", ","),
    ("፤", ";"),
    ("፥", ":"),
    ("፦", ":"),
    ("፧", "?"),
    ("፨", "."),
    ("፡", " "),
    ("(", ","),
    (")", ","),
    ("[", ","),
    ("]", ","),
)
# Marks before the first word (a bullet dash, an opening bracket, a stray ።) are counted as
# what they were, before they are mapped.
_LEADING_MARKS_RE = re.compile("^[-(\\[{<.,;:?!።፣፤፥፦፧፨፡ ]+")
_APOSTROPHE_RE = re.compile("(?<![a-z])'|'(?![a-z])")

# --- step 5: Latin diacritics ----------------------------------------------------------------

_LATIN_RE = re.compile("[\u00c0-\u024f\u1e00-\u1eff]|(?<=[a-z])[\u0300-\u036f]+")
_LATIN_SPECIAL = {
    "ß": "ss", "æ": "ae", "œ": "oe", "ø": "o", "đ": "d", "ð": "d", "þ": "th", "ł": "l", "ı": "i", "ŋ": "ng",
}


@functools.lru_cache(maxsize=4096)
def _fold_latin_text(s: str) -> str:
    if s.lower() in _LATIN_SPECIAL:
        return _LATIN_SPECIAL[s.lower()]
    if unicodedata.combining(s[0]):
        return ""  # a diacritic left after an ASCII letter
    base = "".join(c for c in unicodedata.normalize("NFKD", s) if not unicodedata.combining(c)).lower()
    return base if base.isascii() and base.isalpha() else s  # else dropped in step 6


def _fold_latin(m: re.Match[str]) -> str:
    return _fold_latin_text(m.group())


# --- step 6: what the model cannot read ------------------------------------------------------

_KEEP = f"{ETHIOPIC_LETTER_CLASS}a-z '{PUNCTUATION}\"\\-"
_DROP_RE = re.compile(f"[^{_KEEP}]")
_LETTER_RE = re.compile(f"[{ETHIOPIC_LETTER_CLASS}a-z]")

# --- step 7: homophones ---------------------------------------------------------------------

_HOMOPHONE_RE = re.compile("[" + "".join(chr(cp) for cp in sorted(HOMOPHONE_TABLE)) + "]")


def _fold_homophone(m: re.Match[str]) -> str:
    return chr(HOMOPHONE_TABLE[ord(m.group())])


# --- step 8: layout --------------------------------------------------------------------------

_P = re.escape(PUNCTUATION)
_FREE_HYPHEN_RE = re.compile(f"(?<![^ {_P}\"'\\-])-|-(?![^ {_P}\"'\\-])")
_PUNCT_RUN_RE = re.compile(f" ?[{_P}](?: ?[{_P}])+| [{_P}]")
_SPACE_AFTER_RE = re.compile(f"([{_P}])(?=[^ {_P}\"])")
_LEADING_RE = re.compile(f"^[ {_P}]+")
_MARK_RE = re.compile(f"[{_P}]")
_NOT_SPACE_RE = re.compile("[^ ]")
_SPACE_BEFORE_PUNCT_RE = re.compile(f" +([{_P}])")


def _strongest(m: re.Match[str]) -> str:
    run = m.group().replace(" ", "")
    return min(run, key=_STRENGTH.index)


def _count_dropped(pattern: re.Pattern[str], text: str, dropped: Counter[str]) -> None:
    for ch in pattern.findall(text):
        dropped[ch] += 1


def _drop(text: str, dropped: Counter[str]) -> str:
    def sub(m: re.Match[str]) -> str:
        ch = m.group()
        dropped[ch] += 1
        return "" if unicodedata.category(ch)[0] == "M" else " "

    return _DROP_RE.sub(sub, text)


def _layout_quotes(text: str, dropped: Counter[str]) -> str:
    parts = text.split('"')
    if len(parts) % 2 == 0:  # an unmatched quote: leave the spacing as it is
        return text
    tokens: list[str] = []
    for i, part in enumerate(parts):
        part = part.strip()
        if i % 2:
            if part:
                tokens.append(f'"{part}"')
            else:
                dropped['"'] += 2
        elif part:
            tokens.append(part)
    return _SPACE_BEFORE_PUNCT_RE.sub(r"\1", " ".join(tokens))


def _layout(text: str, dropped: Counter[str]) -> str:
    text = " ".join(text.split())
    if '"' in text:  # first: dropping an empty pair can bring marks together
        text = _layout_quotes(text, dropped)
    if "-" in text:
        text = _FREE_HYPHEN_RE.sub(",", text)
    text = _PUNCT_RUN_RE.sub(_strongest, text)
    text = _SPACE_AFTER_RE.sub(r"\1 ", text)
    text = " ".join(text.split())
    m = _LEADING_RE.match(text)
    if m:
        _count_dropped(_MARK_RE, m.group(), dropped)
        text = text[m.end():]
    return text


def normalize_text(text: str, *, fold_homophones: bool) -> NormalizedText:
    """Normalise one line of Amharic (possibly code-switched) text; see the module docstring."""
    dropped: Counter[str] = Counter()
    if not text or text.isspace():
        return NormalizedText("", dropped)
    text = unicodedata.normalize("NFC", text)
    if _RARE_RE.search(text):  # anything beyond Ethiopic letters/punctuation and ASCII
        if _FORMAT_RE.search(text):
            _count_dropped(_FORMAT_RE, text, dropped)
            text = _FORMAT_RE.sub("", text)
        if _OTHER_DIGIT_RE.search(text):
            text = _OTHER_DIGIT_RE.sub(_ascii_digit, text)
        text = text.translate(_EARLY_TABLE)
    else:
        text = text.lower()  # only ASCII letters are cased here
    text = " ".join(text.split())

    text = expand_abbreviations(text)
    if ETHIOPIC_NUMERAL_RE.search(text):
        text = replace_ethiopic_numerals(text)
    if HAS_DIGIT_RE.search(text):
        text = expand_numbers(expand_fractions_and_times(text))  # 1/2 and 8:30 first: one quantity each

    m = _LEADING_MARKS_RE.match(text)
    if m:
        _count_dropped(_NOT_SPACE_RE, m.group(), dropped)
        text = text[m.end():]
    if "፡" in text or "::" in text:
        text = _DOUBLE_STOP_RE.sub(".", text)
    for mark, mapped in _PUNCT_MAP:
        if mark in text:
            text = text.replace(mark, mapped)
    if "'" in text:
        text = _APOSTROPHE_RE.sub('"', text)
    if _LATIN_RE.search(text):
        text = _LATIN_RE.sub(_fold_latin, text)
    if _DROP_RE.search(text):
        text = _drop(text, dropped)
    if fold_homophones:
        text = _HOMOPHONE_RE.sub(_fold_homophone, text)

    text = _layout(text, dropped)
    if text and not _LETTER_RE.search(text):
        for ch in text.replace(" ", ""):
            dropped[ch] += 1
        text = ""
    return NormalizedText(text, dropped)


def normalize_lines(lines: Iterable[str], *, fold_homophones: bool) -> Iterator[NormalizedText]:
    """Normalise each line (trailing newline ignored), as :func:`normalize_text`."""
    for line in lines:
        yield normalize_text(line, fold_homophones=fold_homophones)
