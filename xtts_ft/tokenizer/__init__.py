"""The Amharic vocabulary: extend the base XTTS vocab.json, encode with it, grow the model to it.

- :func:`build_extended_vocab` / :func:`tokenizer_command`: base vocab + Amharic text -> vocab.json, report.json
- :class:`AmharicTokenizer`: coqui's VoiceBpeTokenizer with 'am' / 'amh'; :func:`make_tokenizer` builds it
- :func:`vocab_fingerprint`, :func:`check_vocab_matches`: tie checkpoints to their vocabulary
- :func:`resize_text_rows`: grow the GPT text embedding/head, old rows untouched
"""

from xtts_ft.tokenizer.command import read_text_lines, tokenizer_command
from xtts_ft.tokenizer.extend import build_extended_vocab
from xtts_ft.tokenizer.fingerprint import check_vocab_matches, vocab_fingerprint
from xtts_ft.tokenizer.report import TOKENS_PER_CHAR_DEFINITION, TokenizerReport
from xtts_ft.tokenizer.resize import resize_text_rows
from xtts_ft.tokenizer.voice_tokenizer import AmharicTokenizer, canonical_language, make_tokenizer

__all__ = [
    "AmharicTokenizer",
    "TOKENS_PER_CHAR_DEFINITION",
    "TokenizerReport",
    "build_extended_vocab",
    "canonical_language",
    "check_vocab_matches",
    "read_text_lines",
    "make_tokenizer",
    "resize_text_rows",
    "tokenizer_command",
    "vocab_fingerprint",
]
