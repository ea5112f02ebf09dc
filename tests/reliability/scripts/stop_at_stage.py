"""Stop ``headless_train.py`` at chosen stages before training, each time running the printed resume command.

Usage: python -m tests.reliability.scripts.stop_at_stage CASES.json RESULTS.json  (start it in a session of its own: the
``prepare`` stop sends SIGINT to the whole process group, as Ctrl-C in a terminal does)

CASES.json is a list of ``{"id", "stops", "argv"}`` (and ``"command": "xtts_ft"`` for a
``python -m xtts_ft`` command line; default ``headless_train.py``). The command runs with a stop
aimed at ``stops[0]``; then the ``Resume with:`` command it printed (its arguments after
``headless_train.py`` or ``xtts_ft``) runs with a stop aimed at ``stops[1]``, and so on; the last
resume runs uninterrupted. ``stops: []`` is one uninterrupted run (the reference weights). The stops:

- ``prepare``:   Ctrl-C (SIGINT to the process group: the prepare workers get it too) once the
                 first clip's audio is back from a worker;
- ``tokenizer``: SIGTERM just after the tokenizer wrote the vocabulary;
- ``codes``:     SIGTERM as the DVAE code cache starts (the cache is cut short);
- ``probe``:     SIGTERM inside the batch-size probe's first try (probing forced on the CPU for that
                 run only; the next runs pick the CPU's batch size as an uninterrupted run does).

Each run calls ``headless_main`` (what ``headless_train.py`` does) or ``main`` (``python -m
xtts_ft``), with stderr captured; an escaping
exception is printed as the interpreter would (``Traceback``) and recorded with rc 1. The package
knows nothing of these patches: they are applied here, around one run, and removed after it.

RESULTS.json: a list of ``{"id", "runs": [{"stop", "argv", "rc", "stderr"}, ...]}``, one entry per run.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import shlex
import signal
import sys
import traceback
from pathlib import Path

from xtts_ft.cli import headless_main, main


@contextlib.contextmanager
def patched(owner, name: str, replacement):
    original = getattr(owner, name)
    setattr(owner, name, replacement(original))
    try:
        yield
    finally:
        setattr(owner, name, original)


def sigterm() -> None:
    os.kill(os.getpid(), signal.SIGTERM)


def stop_at(stage: str) -> contextlib.AbstractContextManager:
    """The patch that makes the command receive its stop signal at ``stage``."""
    if stage == "none":
        return contextlib.nullcontext()
    if stage == "prepare":
        from xtts_ft.data import runner

        def ctrl_c_after_first(wait):
            def wrapped(*args, **kwargs):
                result = wait(*args, **kwargs)
                if not getattr(wrapped, "sent", False):
                    wrapped.sent = True
                    os.killpg(os.getpgrp(), signal.SIGINT)  # every process of the group, as a terminal does
                return result
            return wrapped

        return patched(runner, "wait", ctrl_c_after_first)
    if stage == "tokenizer":
        from xtts_ft import pipeline  # the tokenizer stage calls the name the pipeline imported

        def then_sigterm(build):
            def wrapped(*args, **kwargs):
                report = build(*args, **kwargs)
                sigterm()
                return report
            return wrapped

        return patched(pipeline, "build_extended_vocab", then_sigterm)
    if stage == "codes":
        from xtts_ft.train import session

        def sigterm_first(build):
            def wrapped(*args, **kwargs):
                sigterm()
                return build(*args, **kwargs)
            return wrapped

        return patched(session, "build_codes_cache", sigterm_first)
    if stage == "probe":
        from xtts_ft.train import memory

        stack = contextlib.ExitStack()
        stack.enter_context(patched(memory, "_will_probe", lambda _original: lambda probe, device: True))

        def sigterm_in_first_try(_probe_step):
            return lambda *args, **kwargs: sigterm()  # the first try "fits"; the stop ends the probe before the next

        stack.enter_context(patched(memory, "probe_step", sigterm_in_first_try))
        return stack
    raise SystemExit(f"unknown stage {stage!r}")


def run_command(entry, argv: list[str], stage: str) -> tuple[int, str]:
    root = logging.getLogger()
    for handler in list(root.handlers):  # a fresh process per command line has none
        root.removeHandler(handler)
        handler.close()
    err = io.StringIO()
    with contextlib.redirect_stderr(err), stop_at(stage):
        try:
            rc = entry(argv)
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 1
        except BaseException:  # noqa: BLE001 - recorded as the interpreter would show it, then judged by the test
            traceback.print_exc(file=err)
            rc = 1
    return rc, err.getvalue()


def run_case(case: dict) -> dict:
    runs, argv = [], case["argv"]
    entry, script = (main, "xtts_ft") if case.get("command") == "xtts_ft" else (headless_main, "headless_train.py")
    for stop in [*case["stops"], "none"]:
        rc, stderr = run_command(entry, argv, stop)
        runs.append({"stop": stop, "argv": argv, "rc": rc, "stderr": stderr})
        printed = [line.split("Resume with: ", 1)[1] for line in stderr.splitlines() if "Resume with: " in line]
        if stop == "none" or not printed:
            break
        words = shlex.split(printed[-1])
        if script not in words:
            break
        argv = words[words.index(script) + 1:]
    return {"id": case["id"], "runs": runs}


if __name__ == "__main__":
    cases = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    results = [run_case(case) for case in cases]
    Path(sys.argv[2]).write_text(json.dumps(results, ensure_ascii=False, indent=1), encoding="utf-8")
