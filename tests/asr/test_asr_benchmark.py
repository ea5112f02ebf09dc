"""benchmarks/asr_throughput.py runs (on the small recogniser; the default size is measured by hand)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_asr_throughput_benchmark_reports_its_numbers(tmp_path):
    out = tmp_path / "asr.json"
    done = subprocess.run(
        [sys.executable, "benchmarks/asr_throughput.py", "--size", "small", "--clips", "2", "--batch-size", "2",
         "--threads", "1", "--json", str(out)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["audio_s_per_s"] > 0 and 0 < result["eval_share"] < 1
    assert result["check_minutes_per_1000_clips"] > 0
    assert "audio-seconds/s" in done.stdout and "1,000 clips" in done.stdout
