"""Helpers shared by the trainer tests and scripts/run_small.py (fixtures live in conftest.py).

A module of its own, not conftest: other test folders have a conftest.py too, and ``from conftest
import ...`` would depend on which one was imported last.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import soundfile as sf

from xtts_ft.config import Config, with_changes

REPO = Path(__file__).resolve().parents[2]

SR = 22050


TEXTS = [
    "the quick brown fox", "jumps over the lazy dog", "she sells sea shells", "by the sea shore",
    "peter piper picked a peck", "of pickled peppers", "is this the real life", "is this just fantasy",
    "a tiny model speaks", "and only english", "numbers one two three", "four five and six",
    "the lazy dog sleeps", "the brown fox runs", "sea shells by the shore", "peter picked peppers",
]


def write_wav(path: Path, seconds: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * SR)) / SR
    f0 = 120 + 40 * (seed % 7)
    wav = sum(0.2 / k * np.sin(2 * math.pi * f0 * k * t + rng.uniform(0, 6)) for k in range(1, 5))
    wav = wav * (0.6 + 0.4 * np.sin(2 * math.pi * 3 * t)) + 0.01 * rng.standard_normal(t.shape)
    sf.write(str(path), wav.astype(np.float32), SR, subtype="PCM_16")


def write_csv(path: Path, rows: list[tuple[str, str]]) -> Path:
    lines = ["audio_file|text|speaker_name"] + [f"{a}|{t}|spk{i % 2}" for i, (a, t) in enumerate(rows)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def small_config(run_dir: Path, **sections) -> Config:
    """A config for seconds-long CPU runs; ``sections={"training": {"max_steps": 4}}`` overrides fields."""
    small: dict[str, dict] = {
        "run": {"output_dir": str(run_dir), "device": "cpu"},
        "precision": {"mode": "fp32"},
        "training": {"max_steps": 6, "batch_size": 2, "lr": 1e-3, "warmup_steps": 2, "num_workers": 0, "log_every": 1,
                     "min_conditioning_s": 0.4, "max_conditioning_s": 0.8},
        "evaluation": {"every_steps": 0, "max_eval_batches": 1, "eval_at_start": False},
        "checkpoint": {"every_steps": 3, "keep_last": 2},
        "stability": {"max_consecutive_bad_steps": 3, "max_rollbacks": 1, "snapshot_every": 2},
    }
    for section, values in sections.items():
        small[section] = {**small.get(section, {}), **values}
    return with_changes(Config(), **small)


def read_metrics(run_dir: Path) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def read_events(run_dir: Path) -> list[dict]:
    path = Path(run_dir) / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def train_lines(run_dir: Path) -> list[dict]:
    lines = [r for r in read_metrics(run_dir) if r.get("split") != "eval"]
    assert all("loss" in r and "event" not in r for r in lines)  # metrics.jsonl: step lines and eval lines only
    return lines

