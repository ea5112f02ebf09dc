"""``python -m xtts_ft synthesize``, ``export``, ``score``, ``make-random-model`` and ``publish``: their run functions.

Their options are in commands/arguments.py; cli.py imports this module only once one of them was chosen.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from xtts_ft.base_model import resolve_base_model
from xtts_ft.commands.common import command, load_config_from, setup_logging
from xtts_ft.config import BaseModelConfig, EvaluationConfig
from xtts_ft.evaluate import export_from_checkpoint, synthesize_command
from xtts_ft.evaluate.score import score_command
from xtts_ft.inference.checkpoint_folder import base_for_checkpoint
from xtts_ft.model_folder import EXPORT_META
from xtts_ft.output_folder import check_output, staged_output
from xtts_ft.publish.hub import publish as publish_model
from xtts_ft.random_model import write_random_model
from xtts_ft.speech_device import speech_device


@command()
def synthesize(args: argparse.Namespace) -> int:
    setup_logging(None, args.verbose)
    base = None
    if args.base_model:
        base = resolve_base_model(BaseModelConfig(source=args.base_model))
    out = synthesize_command(Path(args.model), args.text, Path(args.speaker_wav), Path(args.out), base=base,
                             temperature=EvaluationConfig.temperature, device=speech_device(args.device))
    print(f"wrote {out}")
    return 0


@command()
def export(args: argparse.Namespace) -> int:
    setup_logging(None, args.verbose)
    ckpt = Path(args.checkpoint)
    check_output(Path(args.out), "export", args.on_existing, legacy=EXPORT_META)  # before the base model is read
    base = base_for_checkpoint(ckpt, args.base_model)
    out = export_from_checkpoint(ckpt, Path(args.out), base, on_existing=args.on_existing)
    print(f"exported to {out}")
    return 0


@command()
def score(args: argparse.Namespace) -> int:
    setup_logging(None, args.verbose)
    cfg = load_config_from(args)
    if args.out is not None:
        score_command(cfg, Path(args.model), Path(args.out), args.speaker_wav or (), args.base_model)
        print(f"samples kept in {args.out}")
        return 0
    with tempfile.TemporaryDirectory(prefix="xtts_ft_score_") as tmp:  # nothing left in the current folder unasked
        score_command(cfg, Path(args.model), Path(tmp), args.speaker_wav or (), args.base_model)
    print(f"samples were written to the temporary folder {tmp} and removed; pass --out DIR to keep them")
    return 0


@command()
def make_random_model(args: argparse.Namespace) -> int:
    setup_logging(None, args.verbose)
    size = getattr(args, "size", "tiny")  # make-tiny-model has no --size
    out = Path(args.out)
    with staged_output(out, "make-random-model", args.on_existing, marker_extra={"size": size}) as staged:
        write_random_model(staged.path, size=size, seed=args.seed)
    if staged.moved_to is not None:
        print(f"moved the earlier content of {out} to {staged.moved_to}")
    print(f"wrote a {size} RANDOM XTTS (for demos, tests and rehearsals, it cannot speak) to {out}")
    return 0


@command()
def publish(args: argparse.Namespace) -> int:
    setup_logging(None, args.verbose)
    out = Path(args.out or Path("hub_upload") / args.repo_id.split("/")[-1])
    result = publish_model(Path(args.model), args.repo_id, out=out, private=args.private, dry_run=args.dry_run,
                           base_model=args.base_model)
    print(f"wrote {len(result.files)} files to {result.folder}" + (" (dry run: nothing uploaded)" if args.dry_run
                                                                  else f"; uploaded to {result.url}"))
    return 0
