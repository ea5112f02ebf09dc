"""Benchmarks must not rot: each one runs here in its smallest CPU form (numbers are not asserted)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO_ROOT


def test_gpu_throughput_benchmark_runs_small_on_cpu(tmp_path):
    out = subprocess.run(
        [sys.executable, "benchmarks/gpu_throughput.py", "--size", "small", "--steps", "1", "--batches", "2",
         "--precisions", "fp32,bf16", "--json", str(tmp_path / "rows.json")],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    rows = json.loads((tmp_path / "rows.json").read_text())["rows"]
    assert {r["precision"] for r in rows} == {"fp32", "bf16"}
    assert all(r["samples_per_s"] > 0 for r in rows)
    assert "bf16 / fp32 best samples/s" in out.stdout


def test_gpu_throughput_benchmark_runs_with_gradient_checkpointing(tmp_path):
    out = subprocess.run(
        [sys.executable, "benchmarks/gpu_throughput.py", "--size", "small", "--steps", "1", "--batches", "2",
         "--precisions", "fp32", "--gradient-checkpointing", "--json", str(tmp_path / "rows.json")],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    rows = json.loads((tmp_path / "rows.json").read_text())["rows"]
    assert len(rows) == 1 and rows[0]["gradient_checkpointing"] is True and rows[0]["samples_per_s"] > 0
    assert "gradient checkpointing on" in out.stdout
