"""Run many command lines in one Python process, recording what a user would see for each.

Usage: python -m tests.reliability.scripts.cli_batch CASES.json RESULTS.json

CASES.json is a list of ``{"id": ..., "command": "headless" | "xtts_ft", "argv": [...]}``. Each case
calls the function behind the command line (``headless_main`` is all ``headless_train.py`` does;
``main`` is ``python -m xtts_ft``), with stdout and stderr captured. An exception that escapes is
printed the way the interpreter prints it (``Traceback ...``) and recorded with exit code 1, so a
raw traceback shows up exactly as it would in a terminal. One process for all cases saves a torch
import per case and keeps the logging set-up of each case out of the test process.

RESULTS.json: a list of ``{"id", "rc", "stderr", "stdout"}``.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import sys
import traceback
from pathlib import Path

from xtts_ft.cli import headless_main, main


def run_case(case: dict) -> dict:
    root = logging.getLogger()
    for handler in list(root.handlers):  # a fresh process per command line has none
        root.removeHandler(handler)
        handler.close()
    err, out = io.StringIO(), io.StringIO()
    entry = headless_main if case["command"] == "headless" else main
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            rc = entry(case["argv"])
        except SystemExit as exc:  # argparse usage errors
            rc = exc.code if isinstance(exc.code, int) else 1
        except Exception:  # noqa: BLE001 - recorded as the interpreter would show it, then judged by the test
            traceback.print_exc(file=err)
            rc = 1
    return {"id": case["id"], "rc": rc, "stderr": err.getvalue(), "stdout": out.getvalue()}


if __name__ == "__main__":
    cases = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    results = [run_case(case) for case in cases]
    Path(sys.argv[2]).write_text(json.dumps(results, ensure_ascii=False, indent=1), encoding="utf-8")
