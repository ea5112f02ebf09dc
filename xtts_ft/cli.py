"""Both command lines: ``headless_train.py`` (the whole run) and ``python -m xtts_ft <command>``.

User mistakes (``UserError``) are printed as ``error: <message>`` lines and exit non-zero with
no traceback; anything else is a bug and keeps its traceback. Every command's module is imported at the
top (docs/DESIGN.md, "Layers"); only heavy optional packages (Gradio, silero-vad, ...) wait inside their
one adapter until a command uses them.

The long commands (``headless_train.py``, ``train``, ``evaluate``, ``prepare``) run inside one
``StopSignals`` (xtts_ft/stop_signals.py): a SIGINT/SIGTERM anywhere in them is a requested stop,
which ends with the command that continues and exit code 0.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shlex
import sys
import tempfile
import warnings
from collections import Counter
from pathlib import Path
from typing import Callable, Optional, Sequence

import torch

from xtts_ft.asr.command import transcribe_command
from xtts_ft.asr.recognizer import quiet_transformers_logging
from xtts_ft.base_model import resolve_base_model
from xtts_ft.config import (
    BaseModelConfig,
    Config,
    EvaluationConfig,
    RunConfig,
    ServeConfig,
    TextConfig,
    TokenizerConfig,
    field_help,
    load_config,
)
from xtts_ft.config.loading import locate_config
from xtts_ft.config.schema import DATASET_FORMATS
from xtts_ft.data import prepare_command
from xtts_ft.errors import ConfigError, UserError
from xtts_ft.evaluate import export_from_checkpoint, synthesize_command
from xtts_ft.evaluate.checkpoint_base import base_for_checkpoint
from xtts_ft.evaluate.score import score_command
from xtts_ft.evaluate.standalone import evaluate_run
from xtts_ft.ingest.command import ingest
from xtts_ft.model_folder import EXPORT_META
from xtts_ft.output_folder import (
    ADD_HELP,
    ADD_OPTION,
    MOVE_ASIDE_HELP,
    MOVE_ASIDE_OPTION,
    check_output,
    claim_in_place,
    staged_output,
)
from xtts_ft.pipeline import run_pipeline
from xtts_ft.publish.hub import publish
from xtts_ft.random_model import write_random_model
from xtts_ft.run_lock import RunLock
from xtts_ft.serve.command import ServeOptions, serve_command
from xtts_ft.stop_signals import StopRequested, StopSignals, active_signals
from xtts_ft.text import normalize_text
from xtts_ft.text_settings import make_normalizer
from xtts_ft.tokenizer import tokenizer_command
from xtts_ft.train.stopping import continue_command, python_command, report_stop
from xtts_ft.webapp.app import serve

log = logging.getLogger("xtts_ft")

_NOISY_LOGGERS = ("transformers", "TTS", "trainer", "matplotlib", "numba", "fsspec", "urllib3", "httpx", "httpx2")


def setup_logging(run_dir: Optional[Path] = None, verbose: bool = False) -> None:
    """Console lines for a person, plus ``<run_dir>/train.log`` with everything."""
    root = logging.getLogger()
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    for h in list(root.handlers):
        root.removeHandler(h)
    console = logging.StreamHandler(sys.stderr)
    console.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(message)s", "%H:%M:%S"))
    root.addHandler(console)
    if run_dir is not None:
        run_dir.mkdir(parents=True, exist_ok=True)
        fh = logging.FileHandler(run_dir / "train.log", encoding="utf-8")
        fh.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(fh)
    for name in _NOISY_LOGGERS:  # third-party chatter (e.g. GPT2 config warnings) hides our lines
        logging.getLogger(name).setLevel(logging.ERROR)
    # huggingface_hub gives its logger a stderr handler of its own and lets it propagate too: each of its warnings
    # (a download retry) came out twice, once bare and once through ours; ours alone keeps them, in train.log too
    hub = logging.getLogger("huggingface_hub")
    for h in list(hub.handlers):
        if type(h) is logging.StreamHandler:  # the one huggingface_hub adds (a file handler would stay)
            hub.removeHandler(h)
    quiet_transformers_logging()
    # coqui reads reference clips through torchaudio, which warns about its 2.9 plans on every call.
    warnings.filterwarnings("ignore", category=UserWarning, module=r"torchaudio\..*")


def _run(handler: Callable[[argparse.Namespace], int], args: argparse.Namespace, *, stoppable: bool = False) -> int:
    """Run a command handler; ``stoppable``: the whole command honours SIGINT/SIGTERM as a clean stop."""
    signals = StopSignals() if stoppable else contextlib.nullcontext()
    try:
        with signals:
            return handler(args)
    except StopRequested as stop:  # a stage without a run folder of its own to report it (prepare, evaluate)
        _report_rerun(str(stop), signals.signal_name, getattr(args, "command_line", None))
        return 0
    except UserError as exc:
        for line in str(exc).splitlines() or [type(exc).__name__]:
            print(f"error: {line}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _report_rerun(where: str, signal_name: Optional[str], command_line, run_dir: Optional[Path] = None) -> None:
    """A stopped command whose work is kept per piece (prepare's clips, evaluation's checkpoint): run it again."""
    hint = shlex.join([python_command(), *command_line[0], *command_line[1]]) if command_line else "the same command"
    if not logging.getLogger().handlers:
        setup_logging(None)
    report_stop(where, signal_name, hint, saved="what it finished is kept", run_dir=run_dir)


def _load(args: argparse.Namespace):
    problems = []  # options that cannot work, named before the config is even read
    if getattr(args, "max_steps", None) is not None and args.max_steps < 1:
        problems.append(f"--max-steps {args.max_steps}: must be 1 or more (optimizer steps to train for)")
    if getattr(args, "checkpoint", None) and not getattr(args, "evaluate", False):
        problems.append(f"--checkpoint {args.checkpoint}: only used with --evaluate; add --evaluate to evaluate it, "
                        f"or use --resume {args.checkpoint} to continue training from it")
    if getattr(args, "archive_old_run", False) and getattr(args, "evaluate", False):
        problems.append("--archive-old-run: only used when training; --evaluate never moves a run aside")
    if getattr(args, "continue_with_new_data", False) and getattr(args, "evaluate", False):
        problems.append("--continue-with-new-data: only used when training; --evaluate trains nothing")
    if getattr(args, "continue_with_new_data", False) and getattr(args, "archive_old_run", False):
        problems.append("--continue-with-new-data and --archive-old-run: choose one (continue the run on the new "
                        "data, or move it aside and start a new one)")
    for option, key in (("resume", "checkpoint.resume"), ("max_steps", "training.max_steps")):
        given = [item for item in args.set or [] if item.partition("=")[0].strip() == key]
        if getattr(args, option, None) is not None and given:
            problems.append(f"--{option.replace('_', '-')} {getattr(args, option)} and --set {given[0]} both set {key}; "
                            f"give it once")
    if problems:
        raise ConfigError("\n".join(problems))
    overrides = list(args.set or [])
    if getattr(args, "resume", None):
        overrides.append(f"checkpoint.resume={args.resume}")
    if getattr(args, "max_steps", None) is not None:
        overrides.append(f"training.max_steps={args.max_steps}")
    return load_config(args.config, overrides)


def _add_fold_arg(p: argparse.ArgumentParser, with_config: bool = False) -> None:
    default = "--config's, else " if with_config else ""
    p.add_argument("--fold-homophones", action=argparse.BooleanOptionalAction,
                   default=None if with_config else TextConfig.fold_homophones,
                   help=field_help(TextConfig, "fold_homophones") + f" (text.fold_homophones; default: {default}"
                   f"{TextConfig.fold_homophones})")


def _add_old_content_args(p: argparse.ArgumentParser, add: bool = False) -> None:
    """What happens to what --out already holds (xtts_ft/output_folder.py); without an option: refused."""
    group = p.add_mutually_exclusive_group()
    group.add_argument(MOVE_ASIDE_OPTION, dest="on_existing", action="store_const", const="move-aside",
                       default="refuse", help=MOVE_ASIDE_HELP)
    if add:
        group.add_argument(ADD_OPTION, dest="on_existing", action="store_const", const="add", help=ADD_HELP)


def _add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="Run config (YAML); see configs/.")
    p.add_argument(
        "--set", action="append", metavar="KEY=VALUE", help="Override a config value, e.g. --set training.lr=1e-5."
    )
    p.add_argument("--resume", help="auto (latest checkpoint in the run dir), never, or a checkpoint folder.")
    p.add_argument("--max-steps", type=int, help="Shortcut for --set training.max_steps=N.")
    p.add_argument("--archive-old-run", action="store_true",
                   help="If the run folder holds another run's checkpoints (other data or settings, or --resume never), "
                        "move that run into <run.output_dir>/old_runs/<date>_<run id>/ and start this one (nothing is "
                        "deleted). Without it such a command is refused.")
    p.add_argument("--continue-with-new-data", action="store_true",
                   help="If the run folder's run was trained on other data (the dataset's transcripts or audio "
                        "changed, nothing else), continue that run on the new data with its checkpoints and "
                        "vocabulary. Without it such a command is refused.")
    p.add_argument("-v", "--verbose", action="store_true", help="Debug logging.")


# ---------------------------------------------------------------------------------------------
# headless_train.py


ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"


def default_allocator_settings(environ=os.environ) -> None:
    """``expandable_segments:True`` unless the user configured the CUDA allocator themselves.

    Expandable segments let the allocator grow one mapping instead of caching fixed blocks, so
    batches of changing length fragment GPU memory far less. Read when CUDA initialises: the entry
    points call this first, before anything touches the GPU (never at import).
    """
    if not environ.get(ALLOC_CONF) and not environ.get("PYTORCH_ALLOC_CONF"):
        environ[ALLOC_CONF] = "expandable_segments:True"


def _rank() -> tuple[int, int]:
    """(RANK, LOCAL_RANK) as torchrun sets them; (0, 0) for a single process."""
    return int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))


def print_header(cfg, config_path: Optional[Path] = None) -> None:
    """The run's summary, from rank 0 only (every rank would print the same)."""
    rank, local_rank = _rank()
    device = "cuda" if cfg.run.device == "auto" and torch.cuda.is_available() else cfg.run.device
    device = "cpu" if device == "auto" else device
    gpu = ""
    if device == "cuda" and torch.cuda.is_available():
        index = local_rank % torch.cuda.device_count()
        torch.cuda.set_device(index)  # first: a CUDA call before it would open a context on GPU 0 in every rank
        gpu = f" ({torch.cuda.get_device_name(index)})"
    if rank != 0:
        return
    t = cfg.training
    log.info("xtts-ft run: %s", cfg.run_dir)
    if config_path is not None:
        log.info("  config      %s", config_path)
    log.info("  device      %s%s, precision %s", device, gpu, cfg.precision.mode)
    log.info("  base model  %s", cfg.base_model.source)
    for ds in cfg.datasets:
        log.info("  dataset     %s (%s, %s)", ds.path, ds.format, cfg.dataset_language(ds))
    log.info(
        "  training    %d optimizer steps, batch %s x accumulation %d, lr %g, warmup %d, schedule %s",
        t.max_steps, t.batch_size, t.grad_accum_steps, t.lr, t.warmup_steps, t.lr_schedule,
    )


def headless_main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="headless_train.py",
        description="Fine-tune XTTS-v2 on a new language: prepare data, extend the tokenizer, train, evaluate.",
    )
    _add_config_args(parser)
    parser.add_argument("--evaluate", action="store_true", help="Only evaluate (samples + report) a checkpoint.")
    parser.add_argument("--checkpoint", help="With --evaluate: the checkpoint folder (default: latest in the run dir).")
    args = parser.parse_args(argv)
    script = sys.argv[0] if sys.argv and sys.argv[0].endswith("headless_train.py") else "headless_train.py"
    args.command_line = ([script], list(sys.argv[1:] if argv is None else argv))  # for the resume command
    default_allocator_settings()
    return _run(_headless, args, stoppable=True)


def _headless(args: argparse.Namespace) -> int:
    cfg = _load(args)
    # A trainer locks its run folder before it writes anything there, train.log included: a second one is refused
    # with nothing written (xtts_ft/run_lock.py). Under torchrun rank 0 takes it in the pipeline, where a refusal
    # reaches every rank; --evaluate only reads.
    lock = RunLock(cfg.run_dir)
    if not args.evaluate and int(os.environ.get("WORLD_SIZE", "1") or 1) == 1:
        lock.acquire()
    try:
        return _headless_run(args, cfg)
    finally:
        lock.release()


def _headless_run(args: argparse.Namespace, cfg) -> int:
    setup_logging(cfg.run_dir if _rank()[0] == 0 else None, args.verbose)  # one writer of train.log
    # the config was read before logging started: say now which file a bare name found (configs/NAME.yaml)
    print_header(cfg, locate_config(args.config))
    if args.evaluate:
        try:
            report = evaluate_run(cfg, Path(args.checkpoint) if args.checkpoint else None)
        except StopRequested as stop:  # the half-done samples are gone; the run folder records the stop
            signals = active_signals()
            _report_rerun(str(stop), signals.signal_name if signals else None, getattr(args, "command_line", None),
                          run_dir=cfg.run_dir if cfg.run_dir.is_dir() else None)
            return 0
        log.info("report: %s", report)
        return 0
    started_as = getattr(args, "command_line", None)
    command_line = ([python_command(), *started_as[0]], started_as[1]) if started_as else None
    result = run_pipeline(cfg, archive_old_run=args.archive_old_run, command_line=command_line,
                          new_data=args.continue_with_new_data)
    log.info("stopped." if result.stopped_by_signal else "done.")
    log.info("  last checkpoint  %s", result.last_checkpoint)
    if result.best_checkpoint:
        log.info("  best checkpoint  %s (step %s, by checkpoint.best_metric %s)", result.best_checkpoint,
                 result.best_step, cfg.checkpoint.best_metric)
    if result.stopped_early:
        log.info("  early stopping   ended training: no improvement for %d evaluations",
                 cfg.training.early_stopping.patience)
    if result.overfit_warning:
        log.info("  overfitting      seen from step %s on (best step %s): see events.jsonl and the report",
                 result.overfit_warning.get("at_step"), result.overfit_warning.get("best_step"))
    if result.best_export:
        log.info("  best exported    %s", result.best_export)
    log.info("  samples          %s", result.samples_dir)
    log.info("  report           %s", result.report)
    if result.first_eval_loss is not None and result.final_eval_loss is not None:
        log.info("  eval loss        %.4f -> %.4f", result.first_eval_loss, result.final_eval_loss)
    if result.stopped_by_signal:
        log.info("stopped early; resume with: %s",
                 continue_command(command_line, cfg.checkpoint.resume, cfg.run_dir, result.last_checkpoint))
    return 0


# ---------------------------------------------------------------------------------------------
# python -m xtts_ft <command>


def _cmd_normalize(args: argparse.Namespace) -> int:
    dropped: Counter = Counter()
    for line in sys.stdin:
        result = normalize_text(line.rstrip("\n"), fold_homophones=args.fold_homophones)
        dropped.update(result.dropped)
        sys.stdout.write(result.text + "\n")
    if dropped:
        summary = ", ".join(f"{ch!r} x{n}" for ch, n in dropped.most_common(10))
        print(f"dropped {sum(dropped.values())} characters: {summary}", file=sys.stderr)
    return 0


def _cmd_tokenizer(args: argparse.Namespace) -> int:
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
        f"wrote {Path(args.out) / 'vocab.json'}"
    )
    return 0


def _cmd_prepare(args: argparse.Namespace) -> int:
    setup_logging(None, args.verbose)
    if args.config:  # its dataset.* settings (but path and format: --input, --format) and text.fold_homophones
        given = [item for item in args.set or [] if not item.replace(" ", "").startswith("dataset.path=")]
        args.run_config = _load(argparse.Namespace(**{**vars(args), "set": [*given, "dataset.path=."]}))
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


def _prepare_into(args: argparse.Namespace, normalizer, hf: dict) -> int:
    dataset = args.run_config.dataset if args.run_config else None
    report = prepare_command(Path(args.input), Path(args.out), args.format, normalizer=normalizer, config=dataset,
                             **hf)
    for line in report.summary_lines():
        print(line)
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    return _headless(argparse.Namespace(**vars(args), evaluate=False, checkpoint=None))


def _cmd_evaluate(args: argparse.Namespace) -> int:
    return _headless(argparse.Namespace(**vars(args), evaluate=True))



def _cmd_synthesize(args: argparse.Namespace) -> int:
    setup_logging(None, args.verbose)
    base = None
    if args.base_model:
        base = resolve_base_model(BaseModelConfig(source=args.base_model))
    out = synthesize_command(Path(args.model), args.text, Path(args.speaker_wav), Path(args.out), base=base,
                             temperature=EvaluationConfig.temperature)
    print(f"wrote {out}")
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    setup_logging(None, args.verbose)
    ckpt = Path(args.checkpoint)
    check_output(Path(args.out), "export", args.on_existing, legacy=EXPORT_META)  # before the base model is read
    base = base_for_checkpoint(ckpt, args.base_model)
    out = export_from_checkpoint(ckpt, Path(args.out), base, on_existing=args.on_existing)
    print(f"exported to {out}")
    return 0


def _cmd_make_random_model(args: argparse.Namespace) -> int:
    setup_logging(None, args.verbose)
    size = getattr(args, "size", "tiny")  # make-tiny-model has no --size
    out = Path(args.out)
    with staged_output(out, "make-random-model", args.on_existing, marker_extra={"size": size}) as staged:
        write_random_model(staged.path, size=size, seed=args.seed)
    if staged.moved_to is not None:
        print(f"moved the earlier content of {out} to {staged.moved_to}")
    print(f"wrote a {size} RANDOM XTTS (for demos, tests and rehearsals, it cannot speak) to {out}")
    return 0


def _cmd_transcribe(args: argparse.Namespace) -> int:
    setup_logging(None, args.verbose)
    return transcribe_command(_load(args), args.audio, args.model)


def _cmd_score(args: argparse.Namespace) -> int:
    setup_logging(None, args.verbose)
    cfg = _load(args)
    if args.out is not None:
        score_command(cfg, Path(args.model), Path(args.out), args.speaker_wav or (), args.base_model)
        print(f"samples kept in {args.out}")
        return 0
    with tempfile.TemporaryDirectory(prefix="xtts_ft_score_") as tmp:  # nothing left in the current folder unasked
        score_command(cfg, Path(args.model), Path(tmp), args.speaker_wav or (), args.base_model)
    print(f"samples were written to the temporary folder {tmp} and removed; pass --out DIR to keep them")
    return 0


def _cmd_ingest(args: argparse.Namespace) -> int:
    setup_logging(None, args.verbose)
    if args.config:
        # ingest writes the dataset, it does not read one: dataset.path (often not made yet) is not checked
        given = [item for item in args.set or [] if not item.replace(" ", "").startswith("dataset.path=")]
        cfg = _load(argparse.Namespace(**{**vars(args), "set": [*given, "dataset.path=."]}))
    elif args.set:
        raise ConfigError("--set: only used with --config; name the config whose values it overrides")
    else:
        cfg = Config()  # the schema's defaults: dataset durations, ingest.*, asr.model
    try:
        report = ingest(cfg, args.audio, Path(args.out), text=Path(args.text) if args.text else None,
                        subtitles=Path(args.subtitles) if args.subtitles else None, speaker=args.speaker,
                        on_existing=args.on_existing)
    except StopRequested as stop:
        again = " ".join(shlex.quote(a) for a in [python_command(), *args.command_line[0], *args.command_line[1]])
        print(f"ingest stopped ({stop}): nothing was written, {args.out} is as it was. Run it again with: {again}")
        return 0
    for line in report.summary_lines():
        print(line)
    return 0


def _cmd_ui(args: argparse.Namespace) -> int:
    setup_logging(None, args.verbose)
    serve(Path(args.run), host=args.host, port=args.port, auth=args.auth, root_path=args.root_path,
          config=Path(args.config) if args.config else None)
    return 0

def _cmd_serve(args: argparse.Namespace) -> int:
    setup_logging(None, args.verbose)
    return serve_command(ServeOptions(
        model=Path(args.model), host=args.host, port=args.port, api_key=args.api_key,
        voices=Path(args.voices) if args.voices else None, device=args.device, wyoming=args.wyoming,
        base_model=args.base_model, max_codes=args.max_codes,
    ))


def _cmd_publish(args: argparse.Namespace) -> int:
    setup_logging(None, args.verbose)
    out = Path(args.out or Path("hub_upload") / args.repo_id.split("/")[-1])
    result = publish(Path(args.model), args.repo_id, out=out, private=args.private, dry_run=args.dry_run,
                     base_model=args.base_model)
    print(f"wrote {len(result.files)} files to {result.folder}" + (" (dry run: nothing uploaded)" if args.dry_run
                                                                  else f"; uploaded to {result.url}"))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="xtts-ft", description="XTTS-v2 fine-tuning, one stage at a time.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, handler, help: str) -> argparse.ArgumentParser:  # noqa: A002
        p = sub.add_parser(name, help=help, description=help)
        p.set_defaults(handler=handler)
        if name not in ("train", "evaluate"):
            p.add_argument("-v", "--verbose", action="store_true", help="Debug logging.")
        return p

    p = add("prepare", _cmd_prepare, "Turn a dataset folder into a clean training set with a report.")
    p.add_argument("--input", required=True, help="Dataset root folder.")
    p.add_argument("--out", required=True, help="Output folder (metadata_*.csv, wavs/, report.json).")
    p.add_argument("--format", default="auto", choices=DATASET_FORMATS,
                   help="Dataset layout; hf: --input is a parquet/arrow file or folder, or a Hub dataset id.")
    p.add_argument("--audio-column", help="hf: the audio column (default: audio).")
    p.add_argument("--text-column", help="hf: the transcript column (default: text).")
    p.add_argument("--speaker-column", help="hf: a speaker column (default: none).")
    p.add_argument("--split", help="hf: the split to read (default: train).")
    p.add_argument("--config", help="Run config (YAML) whose dataset.* settings apply (its dataset.path and "
                                    "format are --input's and --format's), and text.fold_homophones; default: "
                                    "the schema's defaults.")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="Override a config value (with --config).")
    _add_fold_arg(p, with_config=True)
    _add_old_content_args(p)

    p = add("tokenizer", _cmd_tokenizer, "Extend a base XTTS vocab.json with Amharic BPE tokens.")
    p.add_argument("--base-vocab", required=True, help="The base model's vocab.json.")
    p.add_argument("--text", required=True, nargs="+",
                   help="Amharic text files (one sentence per line), or folders of .txt files.")
    p.add_argument("--new-tokens", type=int, default=TokenizerConfig.new_tokens, help=field_help(TokenizerConfig, "new_tokens"))
    p.add_argument("--min-frequency", type=int, default=TokenizerConfig.min_frequency,
                   help=field_help(TokenizerConfig, "min_frequency"))
    p.add_argument("--eval-text", nargs="+", help="Held-out text files or folders: measured in the report, never trained on.")
    _add_fold_arg(p)
    p.add_argument("--out", required=True, help="Output folder for vocab.json and report.json.")

    p = add("normalize", _cmd_normalize, "Read text on stdin, write what the model reads on stdout.")
    _add_fold_arg(p)

    p = add("train", _cmd_train, "Run the pipeline for a config (same as headless_train.py).")
    _add_config_args(p)

    p = add("evaluate", _cmd_evaluate, "Synthesise samples and write the report for a checkpoint.")
    _add_config_args(p)
    p.add_argument("--checkpoint", help="Checkpoint folder (default: latest in the run dir).")

    p = add("synthesize", _cmd_synthesize, "Speak a text with an exported model or a checkpoint.")
    p.add_argument("--model", required=True, help="An export folder, or a checkpoint folder (then --base-model).")
    p.add_argument("--text", required=True, help="Text to speak (Amharic).")
    p.add_argument("--speaker-wav", required=True, help="Reference clip of the voice (3-10 s).")
    p.add_argument("--out", required=True, help="Output WAV path.")
    p.add_argument("--base-model", help="Base model folder or repo id (only for a checkpoint folder).")

    p = add("export", _cmd_export, "Write a model folder that stock coqui-tts loads.")
    p.add_argument("--checkpoint", required=True, help="Checkpoint folder (runs/<name>/checkpoints/step_XXXXXX).")
    p.add_argument("--out", required=True, help="Output folder.")
    p.add_argument("--base-model", help="Base model folder or repo id (default: the one the run used).")
    _add_old_content_args(p)

    p = add("transcribe", _cmd_transcribe, "Print path<TAB>recognised text for each audio file (asr.model).")
    p.add_argument("--config", required=True, help="Run config (YAML) whose asr section names the recogniser.")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="Override a config value.")
    p.add_argument("--model", help="Recogniser repo id or folder instead of the config's asr.model.")
    p.add_argument("audio", nargs="+", help="Audio files to recognise, or folders of them (the audio files directly "
                                            "in each folder, by name).")

    p = add("score", _cmd_score, "Say the evaluation sentences; print CER, speaker similarity and stop rate.")
    p.add_argument("--model", required=True, help="An export folder, or a checkpoint folder.")
    p.add_argument("--config", required=True, help="Run config (YAML): evaluation.sentences and asr.model.")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="Override a config value.")
    p.add_argument("--speaker-wav", action="append", help="Reference clip of the voice (default: evaluation.speaker_wavs).")
    p.add_argument("--out", help="Folder to keep the samples in (default: a temporary folder, removed at the end).")
    p.add_argument("--base-model", help="Base model folder or repo id (only for a checkpoint folder).")

    p = add("ingest", _cmd_ingest, "Cut long recordings into a dataset (metadata.csv, wavs/, segments.tsv, report).")
    p.add_argument("audio", nargs="+", help="Long recordings, in reading order.")
    p.add_argument("--text", help="The text the recordings read (UTF-8): sentences are force-aligned to the audio.")
    p.add_argument("--subtitles", help="An .srt or .vtt file for the audio (not with --text): cues become clips, "
                                       "offsets corrected.")
    p.add_argument("--out", required=True, help="Output folder: metadata.csv, wavs/, segments.tsv, ingest_report.*")
    p.add_argument("--config", help="Run config (YAML): asr.model, dataset.min/max_duration_s, ingest.* "
                                    "(its dataset.path is not used); default: the schema's defaults.")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="Override a config value (with --config).")
    p.add_argument("--speaker", help="Speaker name in metadata.csv (default: dataset.speaker_name).")
    _add_old_content_args(p, add=True)

    p = add("ui", _cmd_ui, "The web app: data, training you can watch and stop, listening, speaking (Gradio).")
    p.add_argument("--run", default=RunConfig.output_dir,
                   help="Run folder the page opens on (default: %(default)s, run.output_dir's default).")
    p.add_argument("--host", default="127.0.0.1", help="Address to listen on (default: %(default)s; 0.0.0.0 for all).")
    p.add_argument("--port", type=int, default=7860, help="Port (default: %(default)s).")
    p.add_argument("--auth", metavar="USER:PASS", help="Ask for this user name and password before showing the page.")
    p.add_argument("--root-path", help="The URL path the app is served under behind a proxy, e.g. /proxy/7860 "
                                       "(default: Gradio's GRADIO_ROOT_PATH, else none).")
    p.add_argument("--config", help="Config the Train tab starts from (default: the run's own, else configs/*.yaml).")

    p = add("serve", _cmd_serve, "Serve a model over HTTP (OpenAI's /v1/audio/speech) and optionally Wyoming.")
    p.add_argument("--model", required=True, help="An export folder, a checkpoint folder, or a run folder (its best "
                                                  "checkpoint, else its latest).")
    p.add_argument("--host", default=ServeConfig.host, help=field_help(ServeConfig, "host") + " (default: %(default)s)")
    p.add_argument("--port", type=int, default=ServeConfig.port, help=field_help(ServeConfig, "port"))
    p.add_argument("--api-key", help="Require 'Authorization: Bearer KEY' on /v1/ (default: $XTTS_FT_API_KEY; none).")
    p.add_argument("--voices", help="Folder of reference clips (WAV/FLAC/MP3), one voice per file named after it; "
                                    "uploads are saved there too. The run's own speakers are offered as well.")
    p.add_argument("--device", help="cpu, cuda or cuda:N (default: cuda when available).")
    p.add_argument("--wyoming", metavar="tcp://HOST:PORT", help="Also speak the Wyoming protocol (Home Assistant).")
    p.add_argument("--base-model", help="Base model folder or repo id (checkpoint or run folder; default: the one "
                                        "its checkpoint record names).")
    p.add_argument("--max-codes", type=int, help="Cap audio codes per piece below the model's limit (~21.5 per "
                                                 "second; random test models never stop).")

    p = add("publish", _cmd_publish, "Share the model on the Hugging Face Hub: export, model card, samples.")
    p.add_argument("--model", required=True, help="An export folder, a checkpoint folder or a run folder (its best checkpoint).")
    p.add_argument("--repo-id", required=True, help="OWNER/NAME of the Hub model repo (created if absent).")
    p.add_argument("--private", action="store_true", help="Create the repo private (an existing repo keeps its setting).")
    p.add_argument("--dry-run", action="store_true", help="Write the folder with the card, upload nothing.")
    p.add_argument("--out", help="The folder to write and upload (default: hub_upload/NAME).")
    p.add_argument("--base-model", help="Base model folder or repo id (a checkpoint or run; default: the run's).")

    p = add("make-random-model", _cmd_make_random_model, "Write a random XTTS in the XTTS-v2 file layout.")
    p.add_argument("--size", choices=["tiny", "full"], default="tiny",
                   help="tiny: trains in seconds (demo, tests); full: the real XTTS-v2 dimensions (~2.1 GB on disk).")
    p.add_argument("--out", required=True, help="Output folder.")
    p.add_argument("--seed", type=int, default=0, help="Seed of the random weights.")
    _add_old_content_args(p)

    p = add("make-tiny-model", _cmd_make_random_model, "Write a tiny random XTTS (same as make-random-model --size tiny).")
    p.add_argument("--out", required=True, help="Output folder.")
    p.add_argument("--seed", type=int, default=0, help="Seed of the random weights.")
    _add_old_content_args(p)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    args.command_line = (["-m", "xtts_ft"], list(sys.argv[1:] if argv is None else argv))
    default_allocator_settings()
    return _run(args.handler, args, stoppable=args.handler in (_cmd_train, _cmd_evaluate, _cmd_prepare))
