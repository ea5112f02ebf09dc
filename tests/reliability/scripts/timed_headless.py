"""``headless_train.py`` under torchrun, timed per rank: how long this rank took to answer, from its own start.

Usage: torchrun ... -m tests.reliability.scripts.timed_headless OUT_DIR headless_train.py-arguments...

Runs ``xtts_ft.cli.headless_main`` unchanged and writes ``OUT_DIR/rank<N>.json``: its exit code and the seconds
from this process's start (the OS's start time, interpreter start-up included) to its return. torchrun's own
start-up (it imports torch before it starts the ranks) is not the trainer's, and is not counted.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import psutil

from xtts_ft.cli import headless_main


def main() -> int:
    code = headless_main(sys.argv[2:])
    seconds = time.time() - psutil.Process().create_time()
    rank = int(os.environ.get("RANK", "0"))
    (Path(sys.argv[1]) / f"rank{rank}.json").write_text(json.dumps({"exit": code, "seconds": seconds}))
    return code


if __name__ == "__main__":
    sys.exit(main())
