"""Text to align: sentences split at Amharic punctuation, spelled in the recogniser's letters.

A sentence ends at ። ፧ ፨ ! ? (or ``፡፡`` / ``::``, old spellings of the full stop) and at every line
break. What the recogniser can hear is the sentence's *scoring text*
(:func:`xtts_ft.text.error_rates.scoring_text`: numbers read out, homophones folded, punctuation
dropped): the same text CER is computed on. Each of its letters becomes one CTC target id, a space
the recogniser's word delimiter; letters the recogniser has no id for are counted, not guessed.
The sentence itself (as written) is what goes into metadata.csv: ``prepare`` normalises it.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from xtts_ft.text.error_rates import scoring_text

if TYPE_CHECKING:
    from xtts_ft.asr.recognizer import Recognizer

_SENTENCE_END_RE = re.compile(r"(?<=[።፧፨!?])|(?<=፡፡)|(?<=::)|\n")


@dataclass
class TextUnit:
    """One sentence (or subtitle cue) and its CTC targets."""

    index: int
    text: str  # as written
    targets: list[int]  # recogniser token ids, the word delimiter between words
    word_starts: list[int]  # target index of each word's first letter
    words: list[str] = field(default_factory=list)  # the words those letters spell (scoring text)
    cue: tuple[float, float] | None = None  # subtitle cue (start, end) in seconds, when it came from one
    unknown: Counter[str] = field(default_factory=Counter)  # letters the recogniser has no id for


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text`` in order (whitespace collapsed; empty pieces dropped)."""
    pieces = _SENTENCE_END_RE.split(text.replace("\r\n", "\n").replace("\r", "\n"))
    return [" ".join(p.split()) for p in pieces if p and p.strip()]


class Speller:
    """Turns text into the recogniser's target ids (built from the recogniser's vocabulary)."""

    def __init__(self, vocab: dict[str, int], word_delimiter: str) -> None:
        self.vocab = vocab
        self.delimiter_id = vocab[word_delimiter]

    @classmethod
    def for_recognizer(cls, recognizer: Recognizer) -> Speller:
        return cls(recognizer.processor.tokenizer.get_vocab(), recognizer.word_delimiter)

    def unit(self, index: int, text: str, cue: tuple[float, float] | None = None) -> TextUnit:
        targets: list[int] = []
        word_starts: list[int] = []
        words: list[str] = []
        unknown: Counter[str] = Counter()
        for word in scoring_text(text).split():
            ids = []
            for ch in word:
                if ch in self.vocab:
                    ids.append(self.vocab[ch])
                else:
                    unknown[ch] += 1
            if not ids:
                continue
            if targets:
                targets.append(self.delimiter_id)
            word_starts.append(len(targets))
            words.append(word)
            targets.extend(ids)
        return TextUnit(index, text, targets, word_starts, words, cue, unknown)

    def units(self, sentences: list[str]) -> list[TextUnit]:
        return [self.unit(i, s) for i, s in enumerate(sentences)]
