"""The ingest_speed benchmark must not rot: it runs here in its smallest form (numbers not asserted), both modes
in one child process (one interpreter start and one import of torch and the recogniser instead of two)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.ingest.ingesthelpers import REPO_ROOT


def test_ingest_speed_benchmark_runs_small(tmp_path):
    out = subprocess.run(
        [sys.executable, "benchmarks/ingest_speed.py", "--minutes", "0.3", "--threads", "1", "--rate", "22050",
         "--channels", "1", "--dir", str(tmp_path), "--json", str(tmp_path / "rows.json"), "--one-process"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    rows = json.loads((tmp_path / "rows.json").read_text())["rows"]
    assert [r["mode"] for r in rows] == ["text", "vad"]
    assert all(r["clips"] >= 3 and r["minutes_per_audio_hour"] > 0 and r["peak_rss_mb"] > 0 for r in rows)
    assert "min per audio hour" in out.stdout and "every mode in one process" in out.stdout
