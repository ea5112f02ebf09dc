"""What every command's run function shares: the error and stop handling around it, logging, the config.

``@command()`` wraps a run function the way cli.py calls it: user mistakes (``UserError``) are
printed as ``error: <message>`` lines and exit non-zero with no traceback; anything else is a bug
and keeps its traceback. ``@command(stoppable=True)`` (``headless_train.py``, ``train``,
``evaluate``, ``prepare``) runs the whole command inside one ``StopSignals``
(xtts_ft/stop_signals.py): a SIGINT/SIGTERM anywhere in it is a requested stop, which ends with the
command that continues and exit code 0.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import os
import shlex
import sys
import warnings
from pathlib import Path
from typing import Callable, Optional

from xtts_ft.config import Config, load_config
from xtts_ft.errors import ConfigError, UserError
from xtts_ft.run_lock import RunLock, make_run_folder, refuse_if_held_elsewhere
from xtts_ft.stop_report import python_command, report_stop
from xtts_ft.stop_signals import StopRequested, StopSignals

RunFunction = Callable[[argparse.Namespace], int]
#: Set by `launch` for the workers it starts: its own arguments (JSON), so a stopped run prints the launch command.
LAUNCH_ARGS_ENV = "XTTS_FT_LAUNCH_ARGS"

_NOISY_LOGGERS = ("transformers", "TTS", "trainer", "matplotlib", "numba", "fsspec", "urllib3", "httpx", "httpx2")


def command(*, stoppable: bool = False) -> Callable[[RunFunction], RunFunction]:
    """A command's run function as cli.py calls it (see the module doc); ``stoppable``: a stop is a clean end."""
    def wrap(handler: RunFunction) -> RunFunction:
        @functools.wraps(handler)
        def run(args: argparse.Namespace) -> int:
            return _run(handler, args, stoppable=stoppable)
        return run
    return wrap


def _run(handler: RunFunction, args: argparse.Namespace, *, stoppable: bool = False) -> int:
    """Run a command handler; ``stoppable``: the whole command honours SIGINT/SIGTERM as a clean stop."""
    signals = StopSignals() if stoppable else contextlib.nullcontext()
    try:
        with signals:
            return handler(args)
    except StopRequested as stop:  # a stage without a run folder of its own to report it (prepare, evaluate)
        report_rerun(str(stop), signals.signal_name if isinstance(signals, StopSignals) else None,
                     getattr(args, "command_line", None))
        return 0
    except UserError as exc:
        lines = str(exc).splitlines() or [type(exc).__name__]
        for line in lines:
            print(f"error: {line}", file=sys.stderr)
        args.error_line = lines[0]  # what cli.py tells the other ranks of a torchrun job
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def report_rerun(where: str, signal_name: Optional[str], command_line: Optional[tuple[list[str], list[str]]],
                 run_dir: Optional[Path] = None) -> None:
    """A stopped command whose work is kept per piece (prepare's clips, evaluation's checkpoint): run it again.
    ``command_line``: cli.py's ``args.command_line`` (the script or ``-m xtts_ft``, the arguments)."""
    hint = shlex.join([python_command(), *command_line[0], *command_line[1]]) if command_line else "the same command"
    if not logging.getLogger().handlers:
        setup_logging(None)
    report_stop(where, signal_name, hint, saved="what it finished is kept", run_dir=run_dir)


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
        make_run_folder(run_dir)  # one line naming the folder when it cannot be made (evaluate does not lock it)
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
    # torchaudio 2.8 warns about its 2.9 plans at every deprecated call a library may still make (the project reads
    # audio with soundfile, voice references included).
    warnings.filterwarnings("ignore", category=UserWarning, module=r"torchaudio\..*")


def quiet_transformers_logging() -> None:
    """Only errors from transformers, loaded or not, without loading it (a light command never pays for it).

    Its library logger's level is what its ``set_verbosity_error`` sets; but transformers sets that level again,
    from ``TRANSFORMERS_VERBOSITY``, when it is first imported, so a process that has not imported it yet gets
    that variable too.
    """
    logging.getLogger("transformers").setLevel(logging.ERROR)
    if "transformers" not in sys.modules:
        os.environ["TRANSFORMERS_VERBOSITY"] = "error"


@command()
def read_config(args: argparse.Namespace) -> int:
    """The config of a command that reads one, before cli.py imports its run module (``args.loaded_config``).

    A mistake in it is printed as ``error:`` lines (exit 2) without loading torch or coqui; the run function then
    takes the config from ``args`` (``config_of``) instead of reading it again.
    """
    args.loaded_config = load_config_from(args, run_checks=True)  # a run: its recogniser folders are checked too
    return 0


@command()
def lock_run_folder(args: argparse.Namespace) -> int:
    """A trainer's lock on its run folder (xtts_ft/run_lock.py), taken right after ``read_config``: before torch and
    coqui load and before anything is written (train.log included), so a second trainer is refused within a second
    with nothing written in the first one's folder. Kept in ``args.run_lock`` (``release_run_folder`` ends it).

    Under torchrun rank 0 takes it; every other rank is refused at once when a trainer outside its torchrun holds
    the folder. ``--evaluate`` (and the evaluate command) only reads: no lock.
    """
    if getattr(args, "evaluate", False):
        return 0
    run_dir = config_of(args).run_dir
    if int(os.environ.get("RANK", "0") or 0) == 0:
        args.run_lock = RunLock(run_dir).acquire()
    else:
        refuse_if_held_elsewhere(run_dir)
    return 0


def release_run_folder(args: argparse.Namespace) -> None:
    """The end of ``lock_run_folder``'s lock (the pipeline's own hold inside it was released already)."""
    lock = getattr(args, "run_lock", None)
    if isinstance(lock, RunLock):
        lock.release()


def config_of(args: argparse.Namespace) -> Config:
    """The config ``read_config`` read for this command, else (a run function called directly) read it now."""
    loaded = getattr(args, "loaded_config", None)
    return loaded if isinstance(loaded, Config) else load_config_from(args, run_checks=True)


def load_config_from(args: argparse.Namespace, run_checks: bool = False) -> Config:
    """The config a command's --config, --set (and --resume, --max-steps where it has them) make; ``run_checks``:
    that of a training or evaluation run (``load_config``)."""
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
    overrides, given_as = list(args.set or []), {}
    if getattr(args, "resume", None):
        overrides.append(f"checkpoint.resume={args.resume}")
        given_as[overrides[-1]] = f"--resume {args.resume}"
    if getattr(args, "max_steps", None) is not None:
        overrides.append(f"training.max_steps={args.max_steps}")
        given_as[overrides[-1]] = f"--max-steps {args.max_steps}"
    return load_config(args.config, overrides, given_as, run_checks)  # a mistake in an option is named after it
