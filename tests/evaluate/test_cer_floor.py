"""The CER floor: the recogniser's CER on the real eval recordings, measured once, shown next to the sample CER."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from xtts_ft.asr import SMALL_MODEL_DIR
from xtts_ft.asr.recognizer import Recognizer
from xtts_ft.evaluate.cer_floor import measure_cer_floor, read_cer_floor
from xtts_ft.evaluate.report import render_report
from xtts_ft.text.error_rates import error_rates

DEMO = Path(__file__).resolve().parents[2] / "datasets" / "amharic_demo"


class RecordingRecognizer:
    """Wraps a recogniser: keeps what it heard, counts the files it was asked to hear."""

    def __init__(self, inner) -> None:
        self.inner, self.heard, self.heard_files = inner, [], 0

    def transcribe_files(self, paths):
        self.heard_files += len(paths)
        self.heard = self.inner.transcribe_files(paths)
        return self.heard


class HearsNothing:
    def transcribe_files(self, paths):
        return ["" for _ in paths]


@pytest.fixture(scope="module")
def demo_clips() -> list[tuple[Path, str]]:
    with open(DEMO / "metadata.csv", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="|", quoting=csv.QUOTE_NONE))
    rows = sorted(rows, key=lambda r: (DEMO / r["audio_file"]).stat().st_size)[:3]  # short clips: quick to hear
    return [(DEMO / r["audio_file"], r["text"]) for r in rows]


def test_floor_is_the_recognisers_mean_cer_on_the_real_clips_measured_once(tmp_path, demo_clips):
    rec = RecordingRecognizer(Recognizer(SMALL_MODEL_DIR, device="cpu", batch_size=4))  # the committed small one
    run_dir = tmp_path / "run"
    floor = measure_cer_floor(run_dir, rec, "small", demo_clips, max_clips=2)
    assert rec.heard_files == 2
    expected = sum(error_rates(t, h).cer for (_, t), h in zip(demo_clips, rec.heard)) / 2
    assert floor == pytest.approx(expected, abs=1e-4) and 0.0 <= floor < 1.0
    stored = read_cer_floor(run_dir)
    assert stored["clips"] == 2 and [p["wav"] for p in stored["per_clip"]] == [w.name for w, _ in demo_clips[:2]]
    assert (run_dir / "samples" / "cer_floor.json").is_file()

    rec.heard_files = 0  # the next evaluation (or a resumed run) reads it back
    assert measure_cer_floor(run_dir, rec, "small", demo_clips, max_clips=2) == floor and rec.heard_files == 0
    # another recogniser, or other clips: measured again
    assert measure_cer_floor(run_dir, HearsNothing(), "deaf", demo_clips, max_clips=2) == 1.0
    assert read_cer_floor(run_dir)["recognizer"] == "deaf"
    assert measure_cer_floor(run_dir, RecordingRecognizer(HearsNothing()), "deaf", demo_clips, 3) == 1.0
    assert read_cer_floor(run_dir)["clips"] == 3
    assert measure_cer_floor(run_dir, None, "small", demo_clips, 3) is None  # no recogniser, no floor
    assert measure_cer_floor(run_dir, rec, "small", demo_clips, 0) is None  # evaluation.cer_floor_clips: 0


def test_report_puts_short_text_cer_and_stop_rate_first_and_the_cer_against_its_floor(tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / "samples").mkdir(parents=True)
    metrics = {"sample_cer": 0.123, "sample_stop_rate": 0.75, "sample_cer_short": 0.31, "sample_stop_rate_short": 0.5}
    (run_dir / "samples" / "index.jsonl").write_text(json.dumps({"step": 100, "metrics": metrics}) + "\n",
                                                      encoding="utf-8")
    table = render_report(run_dir).split("<h2>Pick a checkpoint</h2>")[1].split("<h2>")[0]
    assert "floor" not in table  # no floor measured: the bare CER
    headers = table.split("<tr>")[1]
    order = [headers.index(h) for h in ("short-text CER", "short-text stop rate", "<th>CER", "<th>stop rate", "eval loss")]
    assert order == sorted(order)
    assert "<td>0.31</td><td>0.5</td><td>—</td><td>0.123</td>" in table  # no tail rate measured: a dash

    floor = {"cer_floor": 0.0912, "clips": 7, "recognizer": "small", "key": "k", "per_clip": []}
    (run_dir / "samples" / "cer_floor.json").write_text(json.dumps(floor), encoding="utf-8")
    table = render_report(run_dir).split("<h2>Pick a checkpoint</h2>")[1].split("<h2>")[0]
    assert "<td>0.12 against a floor of 0.091</td>" in table
    assert "CER floor 0.091" in table and "7 real eval recordings" in table
