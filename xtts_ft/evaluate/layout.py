"""Where evaluation writes inside the run directory (shared by the eval hook and the report)."""

from __future__ import annotations

SAMPLES_DIR = "samples"  # <run_dir>/samples/step_XXXXXX/*.wav
INDEX_FILE = "index.jsonl"  # <run_dir>/samples/index.jsonl: one record per evaluation
REPORT_FILE = "report.html"  # <run_dir>/report.html
CHECKPOINTS_DIR = "checkpoints"  # <run_dir>/checkpoints/step_XXXXXX/


def step_dir_name(step: int) -> str:
    return f"step_{int(step):06d}"
