"""Split normalised text into pieces the model can say, each short enough to start playing soon.

The input is already normalised (``xtts_ft.text``): Ethiopic punctuation has become ``. ? !``
(sentence ends: ። ፧ ፨) and ``, ; :`` (clause marks: ፣ ፤ ፥ ፦), numbers are words, so a comma is
never inside a number here. A piece must fit two limits: the tokenizer's character limit and
the GPT's text-token limit (``fits``). Text is cut at sentence ends first; a sentence that does
not fit is cut at clause marks, then between words, and a single over-long word at the largest
prefix that fits. Very short pieces are joined to a neighbour when the join still fits: XTTS says
a two-word fragment far worse than the same words inside a sentence (the short-text fault).

Before any of that, :func:`check_readable` is the one rule for what a speaker accepts (the HTTP
server, Wyoming and the web app's Speak tab all call it): Amharic text holding letters of another
script (Cyrillic, Chinese, ...) or symbols such as emoji, which the normaliser would drop, is
refused in one line naming them, instead of being spoken with those words silently missing.
Formatting marks (``* # _ / + =``) are read as word breaks, as in training.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Callable

from xtts_ft.errors import DataError
from xtts_ft.languages import AMHARIC, canonical_language
from xtts_ft.text import normalize_text

_SENTENCE_END = re.compile(r"(?<=[.?!])\s+")
_CLAUSE_END = re.compile(r"(?<=[,;:])\s+")


def _cut_words(text: str, fits: Callable[[str], bool]) -> list[str]:
    """Greedy: as many words per piece as fit; a word that alone does not fit is cut by characters."""
    pieces: list[str] = []
    current = ""
    for word in text.split():
        trial = f"{current} {word}".strip()
        if fits(trial):
            current = trial
            continue
        if current:
            pieces.append(current)
        current = word
        while not fits(current):
            n = max((i for i in range(1, len(current)) if fits(current[:i])), default=1)
            pieces.append(current[:n])
            current = current[n:]
    if current:
        pieces.append(current)
    return pieces


def _pack(parts: list[str], fits: Callable[[str], bool], then: Callable[[str], list[str]]) -> list[str]:
    """Join consecutive parts while they fit; a part that alone does not fit is split by ``then``."""
    out: list[str] = []
    current = ""
    for part in parts:
        if not fits(part):
            if current:
                out.append(current)
                current = ""
            out.extend(then(part))
            continue
        trial = f"{current} {part}".strip()
        if fits(trial):
            current = trial
        else:
            out.append(current)
            current = part
    if current:
        out.append(current)
    return out


def _sentences(text: str) -> list[str]:
    return [s for s in _SENTENCE_END.split(text.strip()) if s.strip()]


def split_pieces(text: str, fits: Callable[[str], bool], min_chars: int) -> list[str]:
    """The pieces of ``text`` in order; every one satisfies ``fits``. Empty text gives ``[]``.

    Sentences are kept apart (each is streamed as soon as it is ready) unless one is shorter than
    ``min_chars``: then it is joined to the next (or the previous) when the join fits.
    """
    text = " ".join(text.split())
    if not text:
        return []

    def by_clause(sentence: str) -> list[str]:
        return _pack([c for c in _CLAUSE_END.split(sentence) if c], fits, lambda c: _cut_words(c, fits))

    pieces: list[str] = []
    for sentence in _sentences(text):
        pieces.extend([sentence] if fits(sentence) else by_clause(sentence))
    return _join_short(pieces, fits, min_chars)


def _join_short(pieces: list[str], fits: Callable[[str], bool], min_chars: int) -> list[str]:
    out: list[str] = []
    for piece in pieces:
        if out and (len(out[-1]) < min_chars or len(piece) < min_chars) and fits(f"{out[-1]} {piece}"):
            out[-1] = f"{out[-1]} {piece}"
        else:
            out.append(piece)
    return out


class UnreadableText(DataError):
    """Text the model would read only in part: the rest would be dropped without a word."""


def _script_of(ch: str) -> str:
    name = unicodedata.name(ch, "")
    return name.split(" ")[0].title() if name else "unknown"


def check_readable(text: str, language: str, field: str = "text") -> None:
    """Refuse ``text`` (an :class:`UnreadableText` naming ``field``) when the model would say only part of it.

    For Amharic, what the project's normaliser drops is checked: letters (another script), digits it
    cannot read and symbols (emoji, ©, °) are words or meaning that would vanish. Other languages go
    through coqui's own front-end and are not checked here.
    """
    if canonical_language(language) != AMHARIC:
        return
    dropped = normalize_text(text, fold_homophones=False).dropped
    letters = {ch for ch in dropped if unicodedata.category(ch)[0] in "LN"}
    symbols = {ch for ch in dropped if unicodedata.category(ch) == "So"}
    problems = []
    if letters:
        scripts = ", ".join(sorted({_script_of(ch) for ch in letters}))
        sample = " ".join(w for w in text.split() if letters & set(w))[:40]  # the words they are in
        problems.append(f"letters in a script the model does not read ({scripts}: '{sample}'); write the text in "
                        f"Amharic (Ethiopic script)")
    if symbols:
        shown = " ".join(sorted(symbols))[:40]
        problems.append(f"symbols the model cannot say ({shown}); write them as words or leave them out")
    if problems:
        raise UnreadableText(f"{field}: " + "; and ".join(problems))
