"""Build a full-size base vocabulary in the real XTTS-v2 vocab.json format, from the project's own text.

The real XTTS-v2 ``vocab.json`` cannot be shipped (it comes with the licensed weights), but the
tokenizer code and the full-size rehearsal need one of the same size and shape: a ``tokenizers``
BPE with ``[STOP]``=0, ``[UNK]``=1, ``[SPACE]``=2, characters and merged pieces of the base
languages, and the language tokens plus ``[START]`` as special added tokens in the *middle* of the
id range (coqui's GPT defaults to ``start_text_token=261``, so ``[START]`` is id 261 here too),
6681 ids in all. The text it learns from is generated with ``num2words`` (number words in the base
languages: many distinct words with shared pieces, so BPE finds thousands of real merges) plus
a few English sentences. No Amharic: the base model knows none; the tokenizer stage adds it.
The build is deterministic: the same code writes the same file.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from num2words import num2words
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

FULL_VOCAB_SIZE = 6681  # rows of the real XTTS-v2 GPT text embedding (gpt_number_text_tokens)
START_ID = 261  # coqui GPT's default start_text_token
SPECIALS = ["[STOP]", "[UNK]", "[SPACE]"]
# The base languages of XTTS-v2 as language tokens, with [START] between [de] and [fr] so that
# the block starting at id 259 puts [START] at 261.
ADDED_IN_MIDDLE = ["[en]", "[de]", "[START]", "[fr]", "[es]", "[it]", "[pt]", "[pl]", "[tr]", "[ru]", "[nl]",
                   "[cs]", "[ar]", "[zh-cn]", "[hu]", "[ko]", "[ja]"]
BASE_LANGUAGES = [t[1:-1] for t in ADDED_IN_MIDDLE if t != "[START]"]
_FIRST_ADDED_ID = START_ID - ADDED_IN_MIDDLE.index("[START]")
# num2words has no Chinese or Czech ordinals; Japanese numerals cover the shared CJK characters.
_NUM2WORDS_LANGS = ["en", "de", "fr", "es", "it", "pt", "pl", "tr", "ru", "nl", "cs", "ar", "hu", "ko", "ja"]
_ENGLISH = (
    "the quick brown fox jumps over the lazy dog. is this the real life? is this just fantasy! "
    "she sells sea shells by the sea shore; peter piper picked a peck of pickled peppers. "
    "in twelve point five seconds, that will be twenty dollars, sir. hello world - again, and again..."
)
# Every letter of the base alphabets (Latin with the accents of the European languages, Cyrillic,
# Arabic) and common punctuation and digits, so ordinary base-language text never encodes to [UNK].
_ALPHABETS = " ".join(
    [chr(c) for c in range(ord("a"), ord("z") + 1)] + [chr(c) for c in range(0xDF, 0x100) if c != 0xF7]
    + [chr(c) for c in range(0x100, 0x180) if chr(c).islower()] + [chr(c) for c in range(0x430, 0x450)] + ["ё", "і", "ї", "є"]
    + [chr(c) for c in range(0x621, 0x64B)] + list("0123456789.,!?¿¡;:-'\"()%$&/")
)


def base_language_lines(seed: int = 0, numbers: int = 3000) -> list[str]:
    """Number words (cardinal, ordinal, year) in every base language that num2words speaks."""
    rng = random.Random(seed)
    picks = list(range(numbers)) + [rng.randint(numbers, 10_000_000) for _ in range(numbers)]
    lines = [_ENGLISH] * 20 + [_ALPHABETS] * 2
    for lang in _NUM2WORDS_LANGS:
        for n in picks:
            words = [num2words(n, lang=lang)]
            for to in ("ordinal", "year"):
                try:
                    words.append(num2words(n, lang=lang, to=to))
                except (NotImplementedError, TypeError, ValueError, OverflowError, KeyError, IndexError, AttributeError):
                    pass  # num2words lacks (or breaks on) that form in that language: the cardinal is enough
            lines.append(" ".join(words).lower())
    return lines


def build_base_vocab(out_path: str | Path, size: int = FULL_VOCAB_SIZE, seed: int = 0) -> Path:
    """Train the BPE and write it, with the added tokens moved into the middle of the id range."""
    n_bpe = size - len(ADDED_IN_MIDDLE)
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=n_bpe, special_tokens=SPECIALS, min_frequency=2, show_progress=False)
    tok.train_from_iterator(base_language_lines(seed), trainer=trainer)
    data = json.loads(tok.to_str())
    vocab: dict[str, int] = data["model"]["vocab"]
    if len(vocab) != n_bpe:
        raise RuntimeError(f"base vocabulary: BPE learned {len(vocab)} tokens, {n_bpe} needed; give it more text")
    shift = len(ADDED_IN_MIDDLE)
    vocab = {t: (i + shift if i >= _FIRST_ADDED_ID else i) for t, i in vocab.items()}
    for offset, token in enumerate(ADDED_IN_MIDDLE):
        vocab[token] = _FIRST_ADDED_ID + offset  # in the model vocab too, so tokenizers keeps the id
        data["added_tokens"].append(dict(id=_FIRST_ADDED_ID + offset, content=token, single_word=False,
                                         lstrip=False, rstrip=False, normalized=False, special=True))
    data["model"]["vocab"] = dict(sorted(vocab.items(), key=lambda item: item[1]))
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, ensure_ascii=False) + "\n", encoding="utf-8")
    return out
