"""The prepare_speed benchmark must not rot: it runs here in its smallest form (numbers not asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_prepare_speed_benchmark_runs_small(tmp_path: Path):
    out = subprocess.run(
        [sys.executable, "benchmarks/prepare_speed.py", "--clips", "6", "--workers", "2", "--dir", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "speed ratio" in out.stdout and "ours kept 6" in out.stdout
