"""The stability/cache benchmark must not rot: its smallest CPU form runs (numbers are not asserted)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.train.trainhelpers import REPO


def test_stability_overhead_benchmark_runs_small(tmp_path):
    out = subprocess.run(
        [sys.executable, "benchmarks/stability_overhead.py", "--steps", "2", "--clips", "6", "--batch-size", "2",
         "--json", str(tmp_path / "bench.json")],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    numbers = json.loads((tmp_path / "bench.json").read_text())
    assert numbers["checked_s"] > 0 and numbers["nocache_s"] > 0 and numbers["check_ops_s"] > 0
    assert "overhead" in out.stdout and "faster with the cache" in out.stdout
