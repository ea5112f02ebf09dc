"""The Listen tab's HTML pieces from the run's evaluations (no browser: the functions the page calls)."""

from __future__ import annotations

import json
from pathlib import Path

from xtts_ft.layout import RunLayout
from xtts_ft.webapp import run_view


def _sample(step: int, cer: float) -> dict:
    return {"name": "s0_spk", "index": 0, "speaker": "spk", "text": "ሰላም ነው", "recognized_text": "ሰላም",
            "path": f"samples/step_{step:06d}/s0_spk.wav", "cer": cer, "speaker_similarity": 0.9,
            "ended_with_stop": True}


def test_the_listen_pieces_show_the_latest_evaluation_of_each_step(tmp_path: Path) -> None:
    index = RunLayout(tmp_path).samples_index
    index.parent.mkdir(parents=True)
    lines = [{"step": 2, "metrics": {"sample_cer": 0.5}, "samples": [_sample(2, 0.5)]},
             {"step": 4, "metrics": {"sample_cer": 0.75}, "samples": [_sample(4, 0.75)]},
             {"step": 4, "metrics": {"sample_cer": 0.25, "sample_quality_mos": 1.5, "reference_quality_mos": 2.5,
                                     "sample_tail_rate": 0.5, "sample_tail_rate_short": 1.0},
              "samples": [_sample(4, 0.25)]}]  # step 4 evaluated again
    index.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines) + '{"step": 6, "sam',
                     encoding="utf-8")  # the last line cut short by a kill

    assert sorted(run_view.evaluations(tmp_path)) == [2, 4]
    table = run_view.samples_table(tmp_path, 4)
    assert "mean CER 0.250" in table and "ሰላም ነው" in table and "1 samples" in table and "step_000004" in table
    assert run_view.samples_table(tmp_path, 6) == "<p>No samples for this step.</p>"
    # the listening figures with what they mean; an evaluation without them shows neither
    assert "predicted quality 1.50 against 2.50 for your recordings (-1.00), tail rate 0.50 (short texts 1.00)" in table
    assert "trained on English" in table and "trained on English" not in run_view.samples_table(tmp_path, 2)
    assert run_view.sample_names(tmp_path, 2) == [("0: ሰላም ነው (spk)", "s0_spk")]
    assert run_view.sample_names(tmp_path, 6) == []
    player = run_view.sample_player(tmp_path, 4, "s0_spk", best=4)
    assert "CER 0.250" in player and "&#9733; best" in player and "heard: ሰላም" in player
    assert run_view.sample_player(tmp_path, 2, "s0_spk", best=4).count("best") == 0
    assert run_view.sample_player(tmp_path, None, "s0_spk", best=4) == "<p>-</p>"
