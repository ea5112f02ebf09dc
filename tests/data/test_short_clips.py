"""The dataset report's share of short clips (under 2 s, short texts: under 20 characters) and its warning."""

from __future__ import annotations

import json
from pathlib import Path

from tests.data.datahelpers import SENTENCES, make_cfg, standin_normalize, write_audio
from xtts_ft.config import is_short_text
from xtts_ft.data import prepare_dataset
from xtts_ft.data.reasons import REASONS
from xtts_ft.data.report import PrepareReport, short_clip_share


def _report(durations: list[float], chars: list[int], min_share: float) -> PrepareReport:
    report = PrepareReport(kept=len(durations), kept_train=len(durations), kept_eval=0,
                           rejected={r: 0 for r in REASONS}, hours=0.0, speakers={})
    report.short_clips = short_clip_share(durations, ["ሀ" * n for n in chars], min_share)
    return report


def test_shares_count_clips_under_two_seconds_and_under_twenty_characters():
    report = _report([1.0, 1.99, 2.0, 5.0], [10, 20, 19, 40], min_share=0.25)  # 20 characters: not short
    s = report.short_clips
    assert (s["under_2s"], s["under_2s_share"], s["short_text"], s["short_text_share"]) == (2, 0.5, 2, 0.5)
    assert report.short_clip_warning() is None
    assert report.short_clip_lines() == ["Short clips: 2 of 4 under 2 s (50.0%), 2 under 20 characters (50.0%)"]
    # only the text share falls short: the warning names that one, with its number and the wanted share
    warning = _report([1.0, 1.5, 3.0, 4.0], [30, 30, 30, 10], min_share=0.3).short_clip_warning()
    assert "25.0% of clips are under 20 characters" in warning and "under 2 s" not in warning
    assert "at least 30%" in warning and "dataset.short_clip_min_share" in warning


def test_prepare_warns_with_the_numbers_when_short_clips_are_too_few(tmp_path: Path):
    root = tmp_path / "lj"
    lines = []
    for i in range(4):  # 2-3 s clips: none short in time
        write_audio(root / "wavs" / f"c{i}.wav", seconds=2.0 + 0.3 * i, freq=200 + 40 * i)
        lines.append(f"c{i}|{SENTENCES[i]}|{SENTENCES[i]}")
    (root / "metadata.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    report = prepare_dataset(make_cfg(root, short_clip_min_share=0.3), tmp_path / "out",
                             normalizer=standin_normalize, progress=False)
    short = sum(is_short_text(SENTENCES[i]) for i in range(4))
    assert report.short_clips["under_2s"] == 0 and report.short_clips["short_text"] == short
    text = (tmp_path / "out" / "report.txt").read_text(encoding="utf-8")
    assert "Warning: too few short clips" in text and "0.0% of clips are under 2 s" in text
    assert any(line.startswith("Warning: too few short clips") for line in report.summary_lines())  # the console
    saved = json.loads((tmp_path / "out" / "report.json").read_text(encoding="utf-8"))
    assert saved["short_clips"] == report.short_clips
