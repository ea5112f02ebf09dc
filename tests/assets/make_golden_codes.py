"""Write tests/assets/golden_codes.json: coqui's codes for the golden texts and seeds (tests/inference/golden.py).

Run from the repository root after a deliberate change of the tiny model, its vocabulary or the texts
(``PYTHONPATH=. python -m tests.assets.make_golden_codes``); never to make a failing golden test pass
after a dependency upgrade - that failure is what the file is for (idiap/coqui-ai-TTS #400).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from tokenizers import Tokenizer

from tests.inference.golden import GOLDEN, SEEDS, TEXTS, coqui_codes, golden_model
from xtts_ft.base_model import BaseModelFiles
from xtts_ft.random_model import write_tiny_model


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        base = BaseModelFiles.from_dir(write_tiny_model(Path(tmp) / "tiny", seed=0))
        vocab = Path(tmp) / "vocab.json"
        tok = Tokenizer.from_file(str(base.vocab_json))
        tok.add_special_tokens(["[am]"])
        tok.save(str(vocab))
        xtts, _tokenizer, latents = golden_model(base, vocab)
        codes = [coqui_codes(xtts, latents, text, seed) for text, seed in zip(TEXTS, SEEDS)]
    rows = ",\n".join(f"  {json.dumps(c)}" for c in codes)
    text = f'{{"texts": {json.dumps(TEXTS, ensure_ascii=False)},\n "seeds": {json.dumps(SEEDS)},\n "codes": [\n{rows}\n ]}}\n'
    GOLDEN.write_text(text, encoding="utf-8")
    print(f"wrote {GOLDEN}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
