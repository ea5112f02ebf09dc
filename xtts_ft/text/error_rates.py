"""Amharic-aware error rates: the one place that says how recognised text is scored.

Both the reference and the recognised text go through :func:`scoring_text` before they are
compared:

1. the project's normaliser (:func:`xtts_ft.text.normalizer.normalize_text`) with homophone
   folding on: numbers and Ge'ez numerals are read out as Amharic words, abbreviations expanded,
   ሀ/ሐ/ኀ, ሰ/ሠ, አ/ዐ, ጸ/ፀ (and their orders) folded to one letter, Latin lower-cased;
2. punctuation dropped (``. , ; : ? ! " '``); a ``-`` inside a word becomes a word break;
3. runs of spaces collapsed to one.

Homophone letters sound the same, so a recogniser cannot tell them apart and a writer does not
spell them consistently; counting them as errors would measure spelling, not speech.

Rates (all are edit distance / reference length, so they can exceed 1.0 when the recogniser
inserts a lot):

* ``cer``: character error rate over the scoring text, spaces included;
* ``cer_no_space``: the same with every space removed, because Ge'ez text is not spaced
  consistently (ቤት ውስጥ / ቤትውስጥ) and a spacing difference is not a pronunciation error;
* ``wer``: word error rate over space-separated words; inflated by the same spacing
  inconsistency, so CER is the number to read for Amharic.

An empty reference scores 0.0 against an empty hypothesis and 1.0 against anything else.

Other languages (a run's base-language replay data, scored by their own recogniser) have no
normaliser here: :func:`plain_scoring_text` only lower-cases, turns punctuation into spaces and
collapses spaces, so "Dr." against "doctor" or "3" against "three" counts as an error there.
:func:`error_rates` takes the ``language`` and picks the scoring text.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from xtts_ft.languages import AMHARIC, canonical_language
from xtts_ft.text.normalizer import normalize_text

_PUNCT_RE = re.compile(r"[.,;:?!\"']")


def scoring_text(text: str) -> str:
    """``text`` as it is scored: normalised, homophones folded, no punctuation, single spaces."""
    normalised = normalize_text(text, fold_homophones=True).text
    normalised = _PUNCT_RE.sub(" ", normalised.replace("-", " "))
    return " ".join(normalised.split())


def plain_scoring_text(text: str) -> str:
    """A language without a normaliser here: lower-cased, punctuation (Unicode P*) as spaces, single spaces."""
    kept = "".join(" " if unicodedata.category(c).startswith("P") else c for c in text.lower())
    return " ".join(kept.split())


def scoring_text_for(language: str) -> Callable[[str], str]:
    """Amharic (``am``/``amh``): :func:`scoring_text` with the project's normaliser; any other: plain."""
    return scoring_text if canonical_language(language) == AMHARIC else plain_scoring_text


def edit_distance(ref: Sequence[object], hyp: Sequence[object]) -> int:
    """Levenshtein distance (substitutions, insertions, deletions all cost 1)."""
    if len(ref) < len(hyp):
        ref, hyp = hyp, ref
    previous = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        current = [i]
        for j, h in enumerate(hyp, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (r != h)))
        previous = current
    return previous[-1]


def _rate(ref: Sequence[object], hyp: Sequence[object]) -> float:
    if not ref:
        return 0.0 if not hyp else 1.0
    return edit_distance(ref, hyp) / len(ref)


@dataclass(frozen=True)
class ErrorRates:
    cer: float
    cer_no_space: float
    wer: float
    reference: str  # the scoring text of the reference
    hypothesis: str  # the scoring text of the recognised text


def error_rates(reference: str, hypothesis: str, language: str = "am") -> ErrorRates:
    """CER, CER without spaces and WER of ``hypothesis`` against ``reference`` (raw texts in ``language``)."""
    score_text = scoring_text_for(language)
    ref, hyp = score_text(reference), score_text(hypothesis)
    return ErrorRates(
        cer=_rate(ref, hyp),
        cer_no_space=_rate(ref.replace(" ", ""), hyp.replace(" ", "")),
        wer=_rate(ref.split(), hyp.split()),
        reference=ref,
        hypothesis=hyp,
    )


def cer(reference: str, hypothesis: str) -> float:
    """Character error rate (spaces included) after :func:`scoring_text` on both sides."""
    return _rate(scoring_text(reference), scoring_text(hypothesis))


def corpus_cer(pairs: Sequence[tuple[str, str]]) -> float:
    """Total edits / total reference characters over many (reference, hypothesis) pairs."""
    edits = chars = 0
    for reference, hypothesis in pairs:
        ref, hyp = scoring_text(reference), scoring_text(hypothesis)
        edits += edit_distance(ref, hyp) if ref else len(hyp)
        chars += len(ref)
    return edits / chars if chars else 0.0
