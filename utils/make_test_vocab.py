"""Write tests/assets/xtts_format_vocab.json: the full-size base vocabulary the tokenizer tests use.

    python utils/make_test_vocab.py

It is the same file ``python -m xtts_ft make-random-model --size full`` writes as vocab.json
(:func:`xtts_ft.tokenizer.base_vocab.build_base_vocab`, seed 0): 6681 ids in the real XTTS-v2
format, built by the project from its own generated text. The tests check that the committed file
is what this script writes today, so rerun it whenever the builder changes.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from xtts_ft.tokenizer.base_vocab import build_base_vocab  # noqa: E402

TEST_VOCAB = REPO / "tests" / "assets" / "xtts_format_vocab.json"

if __name__ == "__main__":
    print(build_base_vocab(TEST_VOCAB))
