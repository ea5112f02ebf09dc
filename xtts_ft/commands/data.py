"""``python -m xtts_ft prepare``: its run function (the data package only: no torch, coqui or transformers).

Its options are in commands/arguments.py; cli.py imports this module only once it was chosen.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable

from xtts_ft.commands.common import command, load_config_from, setup_logging
from xtts_ft.config import TextConfig
from xtts_ft.data import prepare_command
from xtts_ft.errors import ConfigError
from xtts_ft.output_folder import claim_in_place
from xtts_ft.text_settings import make_normalizer


@command(stoppable=True)
def prepare(args: argparse.Namespace) -> int:
    setup_logging(None, args.verbose)
    if args.config:  # its dataset.* settings (but path and format: --input, --format) and text.fold_homophones
        given = [item for item in args.set or [] if not item.replace(" ", "").startswith("dataset.path=")]
        args.run_config = load_config_from(argparse.Namespace(**{**vars(args), "set": [*given, "dataset.path=."]}))
    elif args.set:
        raise ConfigError("--set: only used with --config; name the config whose values it overrides")
    else:
        args.run_config = None
    if args.fold_homophones is None:
        args.fold_homophones = (args.run_config.text if args.run_config else TextConfig()).fold_homophones
    normalizer = make_normalizer(args.fold_homophones)
    hf = {key: value for key, value in (("audio_column", args.audio_column), ("text_column", args.text_column),
                                        ("speaker_column", args.speaker_column), ("hf_split", args.split)) if value}

    source, out = Path(args.input).resolve(), Path(args.out).resolve()
    if out == source or out in source.parents or (args.format != "hf" and not source.is_dir()):
        return _prepare_into(args, normalizer, hf)  # a wrong --input: prepare explains it, --out is left alone
    moved = claim_in_place(Path(args.out), "prepare", args.on_existing)
    if moved is not None:
        print(f"moved the earlier content of {args.out} to {moved}")
    return _prepare_into(args, normalizer, hf)


def _prepare_into(args: argparse.Namespace, normalizer: Callable[[str], str], hf: dict[str, str]) -> int:
    dataset = args.run_config.dataset if args.run_config else None
    # no tokenizer here to check characters against; the rest of dataset.* comes from --config and the columns
    report = prepare_command(Path(args.input), Path(args.out), args.format, normalizer=normalizer, config=dataset,
                             allowed_chars=None, progress=True, **hf)
    for line in report.summary_lines():
        print(line)
    return 0
