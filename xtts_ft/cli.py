"""Both command lines: ``headless_train.py`` (the whole run) and ``python -m xtts_ft <command>``.

A table of commands. Each row names the command's options (a function of xtts_ft/commands/arguments.py,
which needs only the config package) and its run function as ``"module:function"``. The parser is built
from the options alone, so ``--help`` loads no torch, coqui, transformers, fastapi or gradio; the chosen
command's module is imported after parsing (``load_run_function``: the one import made at run time, a
named rule of utils/import_graph.py). Every other import sits at the top of its file (docs/DESIGN.md, "Layers").
A command that ``reads_config`` (headless_train.py, train, evaluate) has its config read before that import
(``run_command``), so a mistake in the config or a --set is answered without loading torch or coqui; a trainer
locks its run folder there too (a second trainer is refused before those imports, with nothing written).

What a run function does around its work (``UserError`` printed as ``error: ...`` lines, the long
commands inside one ``StopSignals``) is in xtts_ft/commands/common.py.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Callable, MutableMapping, Optional, Sequence

from xtts_ft.commands import arguments
from xtts_ft.commands.common import LAUNCH_ARGS_ENV, lock_run_folder, read_config, release_run_folder


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
    "launch": Command("Train on this machine's GPUs as one machine of several (torchrun, set up from the "
                      "environment); run it on every machine.", arguments.launch, "xtts_ft.commands.launch:launch"),
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
    module, name = _imported(command.run)
    run: Callable[[argparse.Namespace], int] = getattr(module, name)
    return run


def run_command(command: Command, args: argparse.Namespace) -> int:
    """Run the chosen command; one that ``reads_config`` reads it first (``args.loaded_config``), so a mistake in
    the config or its --set options is answered in a fraction of a second, before torch and coqui load. A trainer
    then locks its run folder (``lock_run_folder``), also before those imports: a second trainer in the folder is
    refused as fast, with nothing written. Under torchrun a rank that stops here tells the others (the ranks of
    other machines, whose config may be fine, would wait for it; they stop with its line: xtts_ft/peers.py)."""
    if not command.reads_config:
        return load_run_function(command)(args)
    code = read_config(args) or lock_run_folder(args)
    if code != 0:
        if int(os.environ.get("WORLD_SIZE", "1") or 1) > 1:
            module, name = _imported(TELL_OTHER_RANKS)
            post_failure: Callable[[str], None] = getattr(module, name)
            post_failure(getattr(args, "error_line", "a config error"))
        return code
    try:
        return load_run_function(command)(args)
    finally:
        release_run_folder(args)


#: Tells the other ranks of a torchrun job that this one failed before joining them (it loads torch).
TELL_OTHER_RANKS = "xtts_ft.peers:post_failure"


def _imported(target: str) -> tuple[ModuleType, str]:
    """The module of a ``module:function`` target, imported now, and the function's name (the caller says what
    the function is: the name is looked up where its type is declared)."""
    module, _, function = target.partition(":")
    return importlib.import_module(module), function


ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"


def default_allocator_settings(environ: MutableMapping[str, str] = os.environ) -> None:
    """``expandable_segments:True`` unless the user configured the CUDA allocator themselves.

    Expandable segments let the allocator grow one mapping instead of caching fixed blocks, so
    batches of changing length fragment GPU memory far less. Read when CUDA initialises: the entry
    points call this first, before anything touches the GPU (never at import).
    """
    if not environ.get(ALLOC_CONF) and not environ.get("PYTORCH_ALLOC_CONF"):
        environ[ALLOC_CONF] = "expandable_segments:True"


MPS_FALLBACK = "PYTORCH_ENABLE_MPS_FALLBACK"


def mps_fallback(args: argparse.Namespace, environ: MutableMapping[str, str] = os.environ) -> None:
    """``--device mps`` (serve, synthesize, ui): operators Apple's GPU lacks run on the CPU instead of failing.

    torch reads the variable once, when it loads: so it is set here, before the command's module is imported,
    unless the user set it (to 0, say) themselves (xtts_ft/speech_device.py)."""
    if str(getattr(args, "device", None) or "").strip().lower() == "mps":
        environ.setdefault(MPS_FALLBACK, "1")


def headless_main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="headless_train.py", description=HEADLESS.help)
    HEADLESS.add_arguments(parser)
    args = parser.parse_args(argv)
    script = sys.argv[0] if sys.argv and sys.argv[0].endswith("headless_train.py") else "headless_train.py"
    args.command_line = ([script], list(sys.argv[1:] if argv is None else argv))  # for the resume command
    launched = os.environ.get(LAUNCH_ARGS_ENV)
    if launched:  # a worker of `python -m xtts_ft launch ...`: that is the command to run again
        args.command_line = (["-m", "xtts_ft", "launch"], json.loads(launched))
    default_allocator_settings()
    return run_command(HEADLESS, args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="xtts-ft", description="XTTS-v2 fine-tuning, one stage at a time.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, command in COMMANDS.items():
        p = sub.add_parser(name, help=command.help, description=command.help)
        if name not in ("train", "evaluate", "launch"):  # theirs comes with the config options
            p.add_argument("-v", "--verbose", action="store_true", help="Debug logging.")
        command.add_arguments(p)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    args.command_line = (["-m", "xtts_ft"], list(sys.argv[1:] if argv is None else argv))
    default_allocator_settings()
    mps_fallback(args)
    return run_command(COMMANDS[args.command], args)
