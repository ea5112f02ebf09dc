"""Run a small training in its own process (for the SIGTERM and the torchrun tests).

Usage: python -m tests.train.scripts.run_small ARGS.json   (or under torchrun, with -m). ARGS.json holds the paths of the test
fixtures, config overrides (section -> {key: value}), ``weights_out``: a folder where every rank
writes its final GPT weights as rank<N>.pt, and ``speaker_wav``: when set, evaluations synthesise
``evaluation.sentences`` in that voice (the pipeline's sample hook).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

import torch

from tests.fixtures.faults import patched_recipe
from tests.train.trainhelpers import small_config
from xtts_ft.base_model import BaseModelFiles
from xtts_ft.model import build_training_model
from xtts_ft.pipeline import run_training
from xtts_ft.tokenizer.voice_tokenizer import AmharicTokenizer
from xtts_ft.train import TrainInputs
from xtts_ft.train.stability import gpt_state_dict


def main() -> int:
    args = json.loads(Path(sys.argv[1]).read_text())
    logging.basicConfig(level=logging.INFO, format="%(relativeCreated)d %(name)s %(levelname)s %(message)s")
    tokenizer = AmharicTokenizer(args["vocab"], normalizer=lambda s: s, char_limit=200, fold_homophones=False)
    built = []

    def factory(base, vocab, tok):
        built.append(build_training_model(base, vocab, tok))
        return built[-1]

    cfg = small_config(Path(args["run_dir"]), **args.get("sections", {}))
    hook = None
    if args.get("speaker_wav"):
        from xtts_ft.evaluate.hook import make_eval_hook

        hook = make_eval_hook(cfg, Path(args["run_dir"]), tokenizer, [Path(args["speaker_wav"])], [], None)
    inputs = TrainInputs(base=BaseModelFiles.from_dir(Path(args["base"])), vocab_path=Path(args["vocab"]),
                         base_vocab_size=args["base_vocab_size"], train_csv=Path(args["train_csv"]),
                         eval_csv=Path(args["eval_csv"]), run_dir=Path(args["run_dir"]), eval_hook=hook)
    with patched_recipe(factory):  # keeps the built model: every rank saves its final weights below
        result = run_training(cfg, inputs, tokenizer=tokenizer)
    if args.get("weights_out"):
        rank = int(os.environ.get("RANK", "0"))
        torch.save(gpt_state_dict(built[0].gpt), Path(args["weights_out"]) / f"rank{rank}.pt")
    logging.getLogger("run_small").info("returned")
    print(f"RESULT step={result.step} stopped_by_signal={result.stopped_by_signal}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
