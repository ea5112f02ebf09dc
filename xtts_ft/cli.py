"""Both command lines: ``headless_train.py`` (the whole run) and ``python -m xtts_ft <command>``.

A table of commands. Each row names the command's options (a function of xtts_ft/commands/arguments.py,
which needs only the config package) and its run function as ``"module:function"``. The parser is built
from the options alone, so ``--help`` loads no torch, coqui, transformers, fastapi or gradio; the chosen
command's module is imported after parsing (``load_run_function``: the one import made at run time, a
named rule of utils/import_graph.py). Every other import sits at the top of its file (docs/DESIGN.md, "Layers").
A command that ``reads_config`` (headless_train.py, train, evaluate) has its config read before that import
(``run_command``), so a mistake in the config or a --set is answered without loading torch or coqui.

What a run function does around its work (``UserError`` printed as ``error: ...`` lines, the long
commands inside one ``StopSignals``) is in xtts_ft/commands/common.py.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from xtts_ft.commands import arguments
from xtts_ft.commands.common import read_config


@dataclass(frozen=True)
class Command:
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]  # its options: needs only the config package
    run: str  # "module:function" of its run function, imported once the command is chosen
    reads_config: bool = False  # its config is read before that import: a mistake in it is answered at once


HEADLESS = Command("Fine-tune XTTS-v2 on a new language: prepare data, extend the tokenizer, train, evaluate.",
                   arguments.headless, "xtts_ft.commands.training:headless", reads_config=True)

COMMANDS: dict[str, Command] = {
    "prepare": Command("Turn a dataset folder into a clean training set with a report.",
                       arguments.prepare, "xtts_ft.commands.data:prepare"),
    "tokenizer": Command("Extend a base XTTS vocab.json with Amharic BPE tokens.",
                         arguments.tokenizer, "xtts_ft.commands.vocab:tokenizer"),
    "normalize": Command("Read text on stdin, write what the model reads on stdout.",
                         arguments.normalize, "xtts_ft.commands.text:normalize"),
    "train": Command("Run the pipeline for a config (same as headless_train.py).",
                     arguments.train, "xtts_ft.commands.training:train", reads_config=True),
    "evaluate": Command("Synthesise samples and write the report for a checkpoint.",
                        arguments.evaluate, "xtts_ft.commands.training:evaluate", reads_config=True),
    "synthesize": Command("Speak a text with an exported model or a checkpoint.",
                          arguments.synthesize, "xtts_ft.commands.models:synthesize"),
    "export": Command("Write a model folder that stock coqui-tts loads.",
                      arguments.export, "xtts_ft.commands.models:export"),
    "transcribe": Command("Print path<TAB>recognised text for each audio file (asr.model).",
                          arguments.transcribe, "xtts_ft.commands.recordings:transcribe"),
    "assess": Command("Print path, predicted quality (mos), SNR, speech after the text (tail_s) and CER per audio file.",
                      arguments.assess, "xtts_ft.commands.recordings:assess"),
    "score": Command("Say the evaluation sentences; print CER, speaker similarity and stop rate.",
                     arguments.score, "xtts_ft.commands.models:score"),
    "ingest": Command("Cut long recordings into a dataset (metadata.csv, wavs/, segments.tsv, report).",
                      arguments.ingest, "xtts_ft.commands.recordings:ingest"),
    "ui": Command("The web app: data, training you can watch and stop, listening, speaking (Gradio).",
                  arguments.ui, "xtts_ft.commands.apps:ui"),
    "serve": Command("Serve a model over HTTP (OpenAI's /v1/audio/speech) and optionally Wyoming.",
                     arguments.serve, "xtts_ft.commands.apps:serve"),
    "publish": Command("Share the model on the Hugging Face Hub: export, model card, samples.",
                       arguments.publish, "xtts_ft.commands.models:publish"),
    "make-random-model": Command("Write a random XTTS in the XTTS-v2 file layout.",
                                 arguments.make_random_model, "xtts_ft.commands.models:make_random_model"),
    "make-tiny-model": Command("Write a tiny random XTTS (same as make-random-model --size tiny).",
                               arguments.make_tiny_model, "xtts_ft.commands.models:make_random_model"),
}


def load_run_function(command: Command) -> Callable[[argparse.Namespace], int]:
    """The chosen command's run function: its module is imported here, after parsing, and only this one."""
    module, _, function = command.run.partition(":")
    return getattr(importlib.import_module(module), function)


def run_command(command: Command, args: argparse.Namespace) -> int:
    """Run the chosen command; one that ``reads_config`` reads it first (``args.loaded_config``), so a mistake in
    the config or its --set options is answered in a fraction of a second, before torch and coqui load."""
    if command.reads_config:
        code = read_config(args)
        if code != 0:
            return code
    return load_run_function(command)(args)


ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"


def default_allocator_settings(environ=os.environ) -> None:
    """``expandable_segments:True`` unless the user configured the CUDA allocator themselves.

    Expandable segments let the allocator grow one mapping instead of caching fixed blocks, so
    batches of changing length fragment GPU memory far less. Read when CUDA initialises: the entry
    points call this first, before anything touches the GPU (never at import).
    """
    if not environ.get(ALLOC_CONF) and not environ.get("PYTORCH_ALLOC_CONF"):
        environ[ALLOC_CONF] = "expandable_segments:True"


def headless_main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="headless_train.py", description=HEADLESS.help)
    HEADLESS.add_arguments(parser)
    args = parser.parse_args(argv)
    script = sys.argv[0] if sys.argv and sys.argv[0].endswith("headless_train.py") else "headless_train.py"
    args.command_line = ([script], list(sys.argv[1:] if argv is None else argv))  # for the resume command
    default_allocator_settings()
    return run_command(HEADLESS, args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="xtts-ft", description="XTTS-v2 fine-tuning, one stage at a time.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, command in COMMANDS.items():
        p = sub.add_parser(name, help=command.help, description=command.help)
        if name not in ("train", "evaluate"):  # theirs comes with the config options
            p.add_argument("-v", "--verbose", action="store_true", help="Debug logging.")
        command.add_arguments(p)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    args.command_line = (["-m", "xtts_ft"], list(sys.argv[1:] if argv is None else argv))
    default_allocator_settings()
    return run_command(COMMANDS[args.command], args)
