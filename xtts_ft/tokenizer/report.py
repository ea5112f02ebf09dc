"""What a vocabulary extension produced, and how well the extended vocabulary compresses text.

Tokens per character (the number every report and benchmark quotes): for normalised texts,
``sum(tokens) / sum(characters)`` where tokens are the ids XTTS feeds the GPT for the text
without the leading language token, each ``[SPACE]`` counting as one token, and characters are
those of the normalised text, spaces included. 1.0 means one token per character (a
character-only vocabulary); lower is better compression. The [UNK] rate is ``[UNK] ids / tokens``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Optional, Sequence

from tokenizers import Tokenizer

from xtts_ft.json_types import JsonObject
from xtts_ft.languages import AMHARIC
from xtts_ft.tokenizer.vocab_file import encode_many

TOKENS_PER_CHAR_DEFINITION = (
    "tokens/char = ids per normalised text, without the leading [am] language token, each [SPACE] "
    "counted as a token, divided by the characters of the normalised text, spaces included; summed "
    "over all texts before dividing. unk_rate = [UNK] ids / those ids."
)


@dataclass
class TokenizerReport:
    """Written as ``report.json`` beside the extended ``vocab.json``."""

    new_tokens_added: int  # new ids: [am] (if new) + characters + merged pieces; vocab_size - base_vocab_size
    vocab_size: int  # rows of the GPT text embedding: highest id + 1
    base_vocab_size: int  # rows before extension; ids below this are untouched base tokens
    train_tokens_per_char: float
    train_unk_rate: float
    eval_tokens_per_char: Optional[float]
    eval_unk_rate: Optional[float]
    top_new_tokens: list[str]  # the most used new multi-character tokens in the training text
    fingerprint: str  # vocab_fingerprint of the written vocab.json
    base_fingerprint: str = ""  # vocab_fingerprint of the base vocab.json it extends
    requested_new_tokens: int = 0
    characters_added: int = 0
    merges_added: int = 0
    min_frequency: int = 0  # as given to build_extended_vocab (tokenizer.min_frequency)
    train_texts: int = 0
    train_characters: int = 0
    eval_texts: int = 0
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> JsonObject:
        out = asdict(self)
        out["tokens_per_char_definition"] = TOKENS_PER_CHAR_DEFINITION
        return out


@dataclass
class Compression:
    tokens: int
    characters: int
    unknown: int
    counts: Counter[int]  # id -> occurrences

    @property
    def tokens_per_char(self) -> float:
        return self.tokens / self.characters if self.characters else 0.0

    @property
    def unk_rate(self) -> float:
        return self.unknown / self.tokens if self.tokens else 0.0


def measure(tokenizer: Tokenizer, texts: Sequence[str], lang: str = AMHARIC) -> Compression:
    """Tokens per character and [UNK] count of already-normalised ``texts`` (see module docstring)."""
    unk_id = tokenizer.token_to_id("[UNK]")
    lang_id = tokenizer.token_to_id(f"[{lang}]")
    counts: Counter[int] = Counter()
    tokens = characters = 0
    for text, ids in zip(texts, encode_many(tokenizer, texts, lang)):
        if lang_id is not None and ids and ids[0] == lang_id:
            ids = ids[1:]
        counts.update(ids)
        tokens += len(ids)
        characters += len(text)
    return Compression(tokens=tokens, characters=characters, unknown=counts[unk_id] if unk_id is not None else 0,
                       counts=counts)


def top_new_tokens(tokenizer: Tokenizer, compression: Compression, first_new_id: int, n: int = 20) -> list[str]:
    """The ``n`` most frequent new tokens longer than one character, most frequent first."""
    out: list[str] = []
    for token_id, _ in compression.counts.most_common():
        if token_id >= first_new_id:
            token = tokenizer.id_to_token(token_id)
            if token is not None and len(token) > 1 and not token.startswith("["):
                out.append(token)
                if len(out) == n:
                    break
    return out
