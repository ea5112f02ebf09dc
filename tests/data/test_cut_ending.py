"""The cut_ending check: clips whose audio stops mid-word are rejected, clips that end in a pause are kept."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import numpy as np
import soundfile as sf

from tests.data.datahelpers import make_cfg, read_tsv, standin_normalize, tone
from xtts_ft.data import prepare_dataset
from xtts_ft.data.levels import ending_level

REPO_ROOT = Path(__file__).resolve().parents[2]
DEMO = REPO_ROOT / "datasets" / "amharic_demo"


def _cut_in_speech(y: np.ndarray, sr: int) -> np.ndarray:
    """``y`` cut at the middle of its loudest 20 ms frame in the second half: inside a vowel."""
    frame = sr // 50
    n = len(y) // frame
    power = (y[: n * frame].reshape(n, frame).astype(np.float64) ** 2).mean(1)
    loudest = n // 2 + int(np.argmax(power[n // 2: int(n * 0.9)]))
    return y[: loudest * frame + frame // 2]


def _demo_subset(tmp_path: Path, cut: set[int]) -> tuple[Path, list[str]]:
    """Six demo clips (espeak-ng speech that ends in silence), those numbered in ``cut`` cut mid-word."""
    with open(DEMO / "metadata.csv", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="|", quoting=csv.QUOTE_NONE))[:6]
    root = tmp_path / "ds"
    (root / "wavs").mkdir(parents=True)
    lines, names = ["audio_file|text|speaker_name"], []
    for i, row in enumerate(rows):
        y, sr = sf.read(str(DEMO / row["audio_file"]), dtype="float32")
        name = f"wavs/clip{i}.wav"
        sf.write(str(root / name), _cut_in_speech(y, sr) if i in cut else y, sr, subtype="PCM_16")
        lines.append(f"{name}|{row['text']}|{row['speaker_name']}")
        names.append(name)
    (root / "metadata.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root, names


def test_exactly_the_clips_cut_mid_speech_are_rejected_as_cut_ending(tmp_path: Path):
    root, names = _demo_subset(tmp_path, cut={1, 3, 4})
    report = prepare_dataset(make_cfg(root, format="coqui"), tmp_path / "out", normalizer=standin_normalize,
                             progress=False)
    rejected = {r["clip_id"]: r for r in read_tsv(tmp_path / "out" / "rejected.tsv")}
    assert {cid: r["reason"] for cid, r in rejected.items()} == {names[i]: "cut_ending" for i in (1, 3, 4)}
    assert report.rejected["cut_ending"] == 3 and report.kept == 3
    assert "dB above its pauses" in rejected[names[1]]["detail"]
    assert "cut_ending" in (tmp_path / "out" / "report.txt").read_text(encoding="utf-8")

    # switched off, the same clips are kept (the check is the only thing that rejected them)
    off = prepare_dataset(make_cfg(root, format="coqui", cut_ending_check=False), tmp_path / "out_off",
                          normalizer=standin_normalize, progress=False)
    assert off.kept == 6 and off.rejected["cut_ending"] == 0


def test_ending_level_judges_the_tail_against_the_clips_own_pauses():
    sr = 22050
    ends_quiet = tone(2.0, sr, pad=0.15)
    level, pause = ending_level(ends_quiet, sr, 30.0)
    assert level <= pause + 1.0
    cut = ends_quiet[: -int(0.15 * sr) - int(0.5 * sr)]  # its trailing pause and half a second of "speech" gone
    level, pause = ending_level(cut, sr, 30.0)
    assert level > pause + 30.0
    # a steady sound with nothing quieter in it shows no pause to compare with: no verdict, not a rejection
    assert ending_level(tone(2.0, sr, pad=0.0), sr, 30.0) is None


def test_the_measurement_script_runs_on_a_few_demo_clips():
    out = subprocess.run([sys.executable, "benchmarks/cut_ending.py", "--clips", "3"], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "good:   0 of 3 rejected as cut_ending" in out.stdout and "cut :   3 of 3 rejected" in out.stdout
