"""Extend a base XTTS vocabulary for Amharic: ``[am]``, every Ethiopic character, and learned BPE merges.

Invariants (each is tested in tests/tokenizer/):

- Every base token keeps its id and every base merge keeps its rank; the base ``added_tokens``
  ([START], language tokens, ... which sit in the middle of the id range) are copied unchanged.
- New ids are appended after the highest base id, in this order: ``[am]`` (a special added token),
  the characters the base lacks (all assigned Ethiopic code points, then any other character the
  training text uses), then the tokens made by new merges. New merges are appended after all base
  merges, and both parts of every new merge exist as tokens.
- A new merge always produces a token containing a target character (Ethiopic, or new to the base),
  so it can never fire on text made only of characters the base knew: such text (English, German,
  ... in the base languages) encodes to exactly the same ids before and after extension.
- ``new_tokens`` counts every new id, so ``vocab_size == base_vocab_size + new_tokens_added``.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Callable, Iterable

from xtts_ft.errors import TokenizerError
from xtts_ft.languages import AMHARIC
from xtts_ft.layout import STAGE_REPORT, VOCAB_FILE
from xtts_ft.tokenizer.bpe import learn_merges, target_words
from xtts_ft.tokenizer.ethiopic import ethiopic_characters, is_ethiopic
from xtts_ft.tokenizer.fingerprint import vocab_fingerprint
from xtts_ft.tokenizer.report import TokenizerReport, measure, top_new_tokens
from xtts_ft.tokenizer.vocab_file import (
    VocabTable,
    id_mismatches,
    load_tokenizer,
    pin_added_tokens,
    read_vocab,
    write_json_atomic,
    write_vocab,
)

log = logging.getLogger(__name__)

LANGUAGE_TOKEN = f"[{AMHARIC}]"


def _normalise_all(texts: Iterable[str], normalizer: Callable[[str], str]) -> list[str]:
    out = []
    for text in texts:
        norm = normalizer(text)
        if norm.strip():
            out.append(norm)
    return out


def _new_characters(table: VocabTable, texts: list[str]) -> list[str]:
    """Characters to add: Ethiopic ones the base lacks, then others the texts use (first seen first)."""
    known = table.single_characters()
    chars = [c for c in ethiopic_characters() if c not in known]
    seen = set(chars) | known
    for text in texts:
        for c in text:
            if c not in seen and not c.isspace():
                seen.add(c)
                chars.append(c)
    return chars


def _add_language_token(table: VocabTable, token_id: int) -> None:
    # Like XTTS's own language tokens: in the model vocab and an added special token with the same id.
    table.vocab[LANGUAGE_TOKEN] = token_id
    table.added_tokens.append(
        {
            "id": token_id,
            "content": LANGUAGE_TOKEN,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
    )


def extend_table(
    table: VocabTable, texts: list[str], new_tokens: int, *, min_frequency: int
) -> tuple[int, int, list[str]]:
    """Grow ``table`` in place; returns (characters added, merges added, notes)."""
    notes: list[str] = []
    needs_lang = LANGUAGE_TOKEN not in table.all_ids()
    chars = _new_characters(table, texts)
    minimum = len(chars) + int(needs_lang)
    if new_tokens < minimum:
        n_eth = sum(1 for c in chars if is_ethiopic(c))
        raise TokenizerError(
            f"{table.path}: new_tokens={new_tokens} is too small: Amharic needs at least {minimum} new tokens "
            f"({n_eth} Ethiopic characters, {len(chars) - n_eth} other new characters"
            f"{', [am]' if needs_lang else ''}); set tokenizer.new_tokens to {minimum} or more (default 2000)"
        )
    pin_added_tokens(table)  # else appending to the model vocab would move [START]/[en]/... (see id_mismatches)
    next_id = table.num_rows
    if needs_lang:
        _add_language_token(table, next_id)
        next_id += 1
    for char in chars:
        table.vocab[char] = next_id
        next_id += 1

    new_chars = set(chars)

    def is_target(c: str) -> bool:
        return c in new_chars or is_ethiopic(c)

    budget = new_tokens - minimum
    existing_merges = set(table.merges)
    merges = learn_merges(
        target_words(texts, is_target),
        budget,
        min_frequency=min_frequency,
        known_tokens=set(table.vocab),
        is_target=is_target,
    )
    added = 0
    for left, right, makes_new in merges:
        if (left, right) in existing_merges:
            continue
        if makes_new:
            table.vocab[left + right] = next_id
            next_id += 1
        table.merges.append((left, right))
        added += makes_new
    if added < budget:
        notes.append(
            f"asked for {new_tokens} new tokens but the training text only supports {minimum + added} "
            f"(merges must occur at least min_frequency={min_frequency} times); add more Amharic text "
            f"(tokenizer.extra_text_files) for better compression"
        )
    return len(chars), added, notes


def build_extended_vocab(
    base_vocab: Path,
    texts: Iterable[str],
    new_tokens: int,
    out_dir: Path,
    *,
    min_frequency: int,
    normalizer: Callable[[str], str],
    eval_texts: Iterable[str] = (),
) -> TokenizerReport:
    """Write ``out_dir/vocab.json`` (base + Amharic) and ``out_dir/report.json``; return the report.

    ``texts`` are the training transcripts (+ extra text), one sentence each; they and
    ``eval_texts`` are normalised with ``normalizer`` (the run's: ``xtts_ft.text_settings.make_normalizer``,
    the one :class:`AmharicTokenizer` applies at encode time) before training and measuring.
    Tokens per character: see :mod:`xtts_ft.tokenizer.report` (``[SPACE]`` counts as a token,
    characters of the normalised text, spaces included).
    """
    started = time.perf_counter()
    base_vocab, out_dir = Path(base_vocab), Path(out_dir)
    table = read_vocab(base_vocab)
    moved = id_mismatches(table)
    if moved:
        raise TokenizerError(
            f"{base_vocab}: token ids written in the file differ from the ids tokenizers gives them "
            f"({', '.join(moved[:3])}); this vocab.json is inconsistent, use the base model's original one"
        )
    base_rows = table.num_rows
    train = _normalise_all(texts, normalizer)
    if not train:
        raise TokenizerError(
            f"{out_dir}: no training text for the tokenizer (every text is empty after normalisation); "
            f"check the transcripts or add tokenizer.extra_text_files"
        )
    evaluation = _normalise_all(eval_texts, normalizer)
    n_chars, n_merges, notes = extend_table(table, train, new_tokens, min_frequency=min_frequency)
    moved = id_mismatches(table)
    if moved:  # a bug here, not a user mistake: never write a vocabulary that moves base ids
        raise RuntimeError(f"extended vocabulary would load with different ids: {', '.join(moved[:5])}")
    vocab_path = out_dir / VOCAB_FILE
    write_vocab(table, vocab_path)

    tok = load_tokenizer(vocab_path)
    train_c = measure(tok, train)
    eval_c = measure(tok, evaluation) if evaluation else None
    vocab_size = read_vocab(vocab_path).num_rows
    report = TokenizerReport(
        new_tokens_added=vocab_size - base_rows,
        vocab_size=vocab_size,
        base_vocab_size=base_rows,
        train_tokens_per_char=round(train_c.tokens_per_char, 4),
        train_unk_rate=round(train_c.unk_rate, 6),
        eval_tokens_per_char=round(eval_c.tokens_per_char, 4) if eval_c else None,
        eval_unk_rate=round(eval_c.unk_rate, 6) if eval_c else None,
        top_new_tokens=top_new_tokens(tok, train_c, base_rows),
        fingerprint=vocab_fingerprint(vocab_path),
        base_fingerprint=vocab_fingerprint(base_vocab),
        requested_new_tokens=new_tokens,
        characters_added=n_chars,
        merges_added=n_merges,
        min_frequency=min_frequency,
        train_texts=len(train),
        train_characters=train_c.characters,
        eval_texts=len(evaluation),
        notes=notes,
    )
    write_json_atomic(out_dir / STAGE_REPORT, report.to_dict())
    for note in notes:
        log.warning("%s", note)
    log.info(
        "vocabulary %s: %d -> %d tokens, %.3f tokens/char on %d training texts (%.1f s)",
        vocab_path, base_rows, vocab_size, report.train_tokens_per_char, len(train), time.perf_counter() - started,
    )
    return report
