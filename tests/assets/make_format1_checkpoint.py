"""Write tests/assets/checkpoint_format1/step_000002: a checkpoint as the code of commit cdd6580 saved it.

Run once, with that commit's code first on the path (``git archive cdd6580 | tar -x -C /tmp/base``,
then, from the repository root, ``PYTHONPATH=/tmp/base:. python -m tests.assets.make_format1_checkpoint``:
the old ``xtts_ft`` comes first, this checkout's ``tests`` package after it). The tiny model (seed 0)
trains 2 steps on 12 synthetic clips, exactly like tests/fixtures/training.py; the
checkpoint folder is then made weights-only by that code's own slimming (optimizer state dropped,
as it does for older checkpoints), which keeps the asset small. tests/train/test_state_record.py
loads it with today's code.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import torch

from tests.train.trainhelpers import TEXTS, small_config, write_csv, write_wav
from xtts_ft.base_model import BaseModelFiles
from xtts_ft.pipeline import run_training
from xtts_ft.random_model import write_tiny_model
from xtts_ft.tokenizer.voice_tokenizer import AmharicTokenizer
from xtts_ft.train import TrainInputs
from xtts_ft.train.slim import strip_optimizer_state

OUT = Path(__file__).resolve().parent / "checkpoint_format1"


def main() -> int:
    from tokenizers import Tokenizer

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        base = BaseModelFiles.from_dir(write_tiny_model(tmp / "base", seed=0))
        tok = Tokenizer.from_file(str(base.vocab_json))
        base_size = tok.get_vocab_size()
        tok.add_special_tokens(["[am]"])
        tok.add_tokens(["qq", "zz"])
        vocab = tmp / "vocab.json"
        tok.save(str(vocab))
        (tmp / "data" / "wavs").mkdir(parents=True)
        rows = []
        for i, text in enumerate(TEXTS):
            name = f"wavs/clip_{i:02d}.wav"
            write_wav(tmp / "data" / name, 1.0 + 0.1 * ((i * 7) % 16), seed=i)
            rows.append((name, text))
        train_csv = write_csv(tmp / "data" / "metadata_train.csv", rows[:12])
        eval_csv = write_csv(tmp / "data" / "metadata_eval.csv", rows[12:])
        run = tmp / "run"
        cfg = small_config(run, training={"max_steps": 2}, checkpoint={"every_steps": 2, "keep_last": 1})
        tokenizer = AmharicTokenizer(str(vocab), normalizer=lambda s: s)
        run_training(cfg, TrainInputs(base=base, vocab_path=vocab, base_vocab_size=base_size, train_csv=train_csv,
                                      eval_csv=eval_csv, run_dir=run), tokenizer=tokenizer)
        folder = run / "checkpoints" / "step_000002"
        strip_optimizer_state(folder)
        shutil.rmtree(OUT, ignore_errors=True)
        shutil.copytree(folder, OUT / folder.name)
    print(f"wrote {OUT / folder.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
