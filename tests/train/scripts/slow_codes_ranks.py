"""run_small.py under torchrun with a short default-group timeout and a slow DVAE code cache on rank 0.

Usage: torchrun --nproc_per_node=2 -m tests.train.scripts.slow_codes_ranks ARGS.json. Besides run_small's keys, ARGS.json
holds ``collective_timeout_s`` (the default process group's timeout, which is 60 min in a real run)
and ``slow_codes_s`` (how long rank 0's cache build sleeps first: a large dataset on a slow disk).
Every rank writes how long it spent preparing the codes to ``weights_out``/codes_rank<N>.json.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import time
from pathlib import Path

from tests.train.scripts import run_small
from xtts_ft.train import distributed, session


def main() -> int:
    args = json.loads(Path(sys.argv[1]).read_text())
    rank = int(os.environ["RANK"])
    distributed.COLLECTIVE_TIMEOUT = datetime.timedelta(seconds=args["collective_timeout_s"])
    build, prepare = session.build_codes_cache, session.load_data

    def slow_build(*a, **kw):
        if rank == 0:
            time.sleep(args["slow_codes_s"])
        return build(*a, **kw)

    def timed_prepare(*a, **kw):
        started = time.perf_counter()
        out = prepare(*a, **kw)
        seconds = time.perf_counter() - started
        Path(args["weights_out"], f"codes_rank{rank}.json").write_text(json.dumps({"seconds": seconds}))
        return out

    session.build_codes_cache = slow_build
    session.load_data = timed_prepare
    return run_small.main()


if __name__ == "__main__":
    sys.exit(main())
