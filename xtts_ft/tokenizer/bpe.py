"""Learn Amharic BPE merges with the ``tokenizers`` trainer, on text in the form XTTS encodes it.

XTTS never lets a merge cross a space: encode replaces spaces by the added token ``[SPACE]``,
which the tokenizer cuts out before the ``Whitespace`` pre-tokenizer splits the rest into words.
So the trainer is given exactly those words (:func:`xtts_words`), one sequence per text. The
trainer itself cannot be given ``[SPACE]``-joined text: it does not cut out added tokens and would
learn merges of the letters of "[SPACE]".

Only words that hold a *target* character (Ethiopic, or a character the base vocabulary lacks) are
counted, and only merges whose result holds one are kept: a merge made only of characters the base
vocabulary already knows could fire on English/German/... words and change their ids.
"""

from __future__ import annotations

import json
import logging
from typing import Callable, Iterable, Sequence

from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from xtts_ft.tokenizer.vocab_file import xtts_words

log = logging.getLogger(__name__)

Merge = tuple[str, str]


def target_words(texts: Iterable[str], is_target: Callable[[str], bool]) -> list[str]:
    """One training sequence per text: its XTTS words that contain a target character, space-joined."""
    out = []
    for text in texts:
        words = [w for w in xtts_words(text) if any(is_target(c) for c in w)]
        if words:
            out.append(" ".join(words))
    return out


def _train(sequences: Sequence[str], num_merges: int, min_frequency: int) -> tuple[list[Merge], bool]:
    """(merges in rank order, whether the trainer stopped at its size limit rather than running out)."""
    alphabet = {c for s in sequences for c in s}  # a few too many (spaces) only loosens the size limit
    vocab_size = len(alphabet) + 1 + num_merges
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=max(1, min_frequency),
        special_tokens=["[UNK]"],
        limit_alphabet=len(alphabet),
        show_progress=False,
    )
    tok.train_from_iterator(sequences, trainer=trainer)
    raw = json.loads(tok.to_str())["model"]["merges"]
    merges = [(a, b) for a, b in (m.split(" ") if isinstance(m, str) else m for m in raw)]  # "a b" or ["a", "b"]
    return merges, tok.get_vocab_size() >= vocab_size


def learn_merges(
    sequences: Sequence[str],
    budget: int,
    *,
    min_frequency: int,
    known_tokens: set[str],
    is_target: Callable[[str], bool],
) -> list[tuple[str, str, bool]]:
    """Up to ``budget`` new tokens' worth of merges, as (left, right, makes_new_token), in rank order.

    ``known_tokens`` are the tokens both parts may come from (base vocabulary plus the characters
    being added). A merge is kept only if both parts exist by then and its result contains a target
    character. A kept merge whose result already exists as a new token adds no token (BPE may reach
    one string by two pair orders). Training is repeated with a larger limit while merges that are
    dropped leave the budget unfilled and the trainer still had more to give.
    """
    if budget <= 0 or not sequences:
        return []
    extra = max(50, budget // 10)
    while True:
        learned, hit_limit = _train(sequences, budget + extra, min_frequency)
        kept: list[tuple[str, str, bool]] = []
        available = set(known_tokens)
        new_count = 0
        for left, right in learned:
            token = left + right
            if left not in available or right not in available or not any(is_target(c) for c in token):
                continue
            makes_new = token not in available
            if makes_new and new_count == budget:
                break
            if token in known_tokens:
                continue  # a base token: never give it a new merge path
            kept.append((left, right, makes_new))
            available.add(token)
            new_count += makes_new
        if new_count >= budget or not hit_limit:
            if new_count < budget:
                log.info("BPE found %d of %d merges at min_frequency=%d", new_count, budget, min_frequency)
            return kept
        extra *= 2
