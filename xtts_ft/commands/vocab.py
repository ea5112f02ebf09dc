"""``python -m xtts_ft tokenizer``: its run function (the tokenizer package, which loads torch and coqui).

Its options are in commands/arguments.py; cli.py imports this module only once it was chosen.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from xtts_ft.commands.common import command, setup_logging
from xtts_ft.layout import VOCAB_FILE
from xtts_ft.text_settings import make_normalizer
from xtts_ft.tokenizer import tokenizer_command


@command()
def tokenizer(args: argparse.Namespace) -> int:
    setup_logging(None, args.verbose)
    report = tokenizer_command(
        Path(args.base_vocab), [Path(t) for t in args.text], args.new_tokens, Path(args.out),
        make_normalizer(args.fold_homophones), min_frequency=args.min_frequency,
        eval_files=[Path(t) for t in args.eval_text or []],
    )
    held_out = f", {report.eval_tokens_per_char:.3f} on --eval-text" if report.eval_tokens_per_char is not None else ""
    print(
        f"{report.new_tokens_added} new tokens, vocab {report.base_vocab_size} -> {report.vocab_size}, "
        f"{report.train_tokens_per_char:.3f} tokens/char on the training text{held_out}; "
        f"wrote {Path(args.out) / VOCAB_FILE}"
    )
    return 0
