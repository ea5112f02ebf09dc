"""``python -m xtts_ft transcribe``, ``assess`` and ``ingest``: their run functions (they load the recogniser's
packages).

Their options are in commands/arguments.py; cli.py imports this module only once one of them was chosen.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from xtts_ft.asr.command import transcribe_command
from xtts_ft.assess.command import assess_command
from xtts_ft.commands.common import command, load_config_from, setup_logging
from xtts_ft.config import Config
from xtts_ft.errors import ConfigError
from xtts_ft.ingest.command import ingest as ingest_recordings
from xtts_ft.stop_report import python_command
from xtts_ft.stop_signals import StopRequested


@command()
def transcribe(args: argparse.Namespace) -> int:
    setup_logging(None, args.verbose)
    return transcribe_command(load_config_from(args), args.audio, args.model)


@command()
def assess(args: argparse.Namespace) -> int:
    setup_logging(None, args.verbose)
    return assess_command(load_config_from(args), args.audio, Path(args.texts) if args.texts else None)


@command()
def ingest(args: argparse.Namespace) -> int:
    setup_logging(None, args.verbose)
    if args.config:
        # ingest writes the dataset, it does not read one: dataset.path (often not made yet) is not checked
        given = [item for item in args.set or [] if not item.replace(" ", "").startswith("dataset.path=")]
        cfg = load_config_from(argparse.Namespace(**{**vars(args), "set": [*given, "dataset.path=."]}))
    elif args.set:
        raise ConfigError("--set: only used with --config; name the config whose values it overrides")
    else:
        cfg = Config()  # the schema's defaults: dataset durations, ingest.*, asr.model
    try:
        report = ingest_recordings(cfg, args.audio, Path(args.out), text=Path(args.text) if args.text else None,
                                   subtitles=Path(args.subtitles) if args.subtitles else None, speaker=args.speaker,
                                   on_existing=args.on_existing)
    except StopRequested as stop:
        again = " ".join(shlex.quote(a) for a in [python_command(), *args.command_line[0], *args.command_line[1]])
        print(f"ingest stopped ({stop}): nothing was written, {args.out} is as it was. Run it again with: {again}")
        return 0
    for line in report.summary_lines():
        print(line)
    return 0
