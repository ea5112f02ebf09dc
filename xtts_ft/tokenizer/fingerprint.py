"""A vocabulary fingerprint: the hash of the token table, stored with checkpoints and exports.

A checkpoint's text embedding rows only mean something with the vocabulary they were trained
with. :func:`check_vocab_matches` turns a mismatch into one clear sentence instead of the
"size mismatch for gpt.text_embedding.weight" traceback (or, worse, a silent load when the sizes
happen to agree but the tokens differ).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from xtts_ft.errors import TokenizerError
from xtts_ft.tokenizer.vocab_file import effective_merges, read_vocab


def vocab_fingerprint(vocab_path: str | Path) -> str:
    """16 hex digits of sha256 over (token, id) pairs, merges in effective rank order and added tokens.

    Equal fingerprints mean the same ids for every text. Formatting does not matter: merges
    stored as "a b" or ["a", "b"], repeated merges, key order and indentation all give the same
    fingerprint as the file ``tokenizers`` would re-save.
    """
    table = read_vocab(vocab_path)
    blob = {
        "vocab": sorted(table.vocab.items(), key=lambda kv: (kv[1], kv[0])),
        "merges": [[a, b] for a, b in effective_merges(table.merges)],
        "added": sorted((t["id"], t["content"], bool(t.get("special", False))) for t in table.added_tokens),
    }
    data = json.dumps(blob, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return hashlib.sha256(data).hexdigest()[:16]


def check_vocab_matches(expected_fp: str, actual_vocab: Path, where: str) -> None:
    """Raise TokenizerError unless ``actual_vocab`` has fingerprint ``expected_fp``.

    ``where`` names what was trained with ``expected_fp``, e.g. "runs/am/checkpoints/step_000500".
    """
    actual_fp = vocab_fingerprint(actual_vocab)
    if actual_fp != expected_fp:
        raise TokenizerError(
            f"checkpoint {where} was trained with vocabulary {expected_fp} but {actual_vocab} is {actual_fp}; "
            f"use the vocab.json saved in the checkpoint folder, or start a new run (resume: never)"
        )
