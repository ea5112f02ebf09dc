"""``headless_train.py`` under torchrun, plus what a test needs to know about each rank afterwards.

Usage: torchrun ... -m tests.train.scripts.headless_ranks OUT_DIR headless_train.py-arguments...

Runs ``xtts_ft.cli.headless_main`` unchanged, counting in this process how often each stage that
writes files really did its work (not only checked that its outputs were current), and writes
``OUT_DIR/rank<N>.json`` (the counts) and ``OUT_DIR/rank<N>.pt`` (this rank's final GPT weights).
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path

import torch

import xtts_ft.random_model
import xtts_ft.train.session as session
from xtts_ft import pipeline
from xtts_ft.cli import headless_main
from xtts_ft.train.stability import gpt_state_dict

calls: Counter = Counter()
built: list = []


def counted(module, name: str) -> None:
    real = getattr(module, name)

    def wrapper(*args, **kwargs):
        calls[name] += 1
        return real(*args, **kwargs)

    setattr(module, name, wrapper)


def main() -> int:
    out = Path(sys.argv[1])
    # counted where they are looked up when called: the pipeline binds its stage functions at import
    for module, name in [(pipeline, "prepare_dataset"), (pipeline, "build_extended_vocab"),
                         (pipeline, "write_report"), (xtts_ft.random_model, "write_tiny_model")]:
        counted(module, name)
    real_codes, real_build = session.build_codes_cache, session.build_training_model

    def codes(model, clips, cache_dir, *args, **kwargs):
        cached = {p.name for p in Path(cache_dir).glob("*.npy")} if Path(cache_dir).is_dir() else set()
        paths = real_codes(model, clips, cache_dir, *args, **kwargs)
        calls["dvae_codes_computed"] += sum(1 for p in paths if p.name not in cached)
        return paths

    def build(*args):
        built.append(real_build(*args))
        return built[-1]

    session.build_codes_cache, session.build_training_model = codes, build
    code = headless_main(sys.argv[2:])
    rank = int(os.environ.get("RANK", "0"))
    (out / f"rank{rank}.json").write_text(json.dumps({"exit": code, **calls}))
    if built:
        torch.save(gpt_state_dict(built[0].gpt), out / f"rank{rank}.pt")
    return code


if __name__ == "__main__":
    sys.exit(main())
