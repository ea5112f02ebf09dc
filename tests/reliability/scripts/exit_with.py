"""A stand-in script for tests/reliability/test_fork_server.py: ``python -m tests.reliability.scripts.exit_with HOW``.

Prints its arguments and ``FORK_TEST`` from its environment, then: ``code N`` exits N; ``raise`` raises; ``sleep``
sleeps until killed.
"""

from __future__ import annotations

import os
import sys
import time

if __name__ == "__main__":
    print(f"argv={sys.argv[1:]} env={os.environ.get('FORK_TEST')} orig={sys.orig_argv[1:3]}", flush=True)
    how = sys.argv[1]
    if how == "raise":
        raise RuntimeError("a script that fails")
    if how == "sleep":
        time.sleep(3600)
    sys.exit(int(sys.argv[2]))
