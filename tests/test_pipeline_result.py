"""PipelineResult holds training's TrainResult (no copied fields); summary.json keeps the keys it always had."""

from __future__ import annotations

import json

from xtts_ft.pipeline import PipelineResult
from xtts_ft.train import TrainResult

SUMMARY_KEYS = {"run_dir", "data_dir", "vocab_path", "last_checkpoint", "best_checkpoint", "samples_dir", "report",
                "stopped_by_signal", "first_eval_loss", "final_eval_loss", "best_step", "stopped_early",
                "overfit_warning", "best_export", "dvae"}  # what readers (the web app, the end-to-end test) rely on


def test_the_summary_reads_the_training_result(tmp_path):
    checkpoints = tmp_path / "run" / "checkpoints"
    trained = TrainResult(step=4, last_checkpoint=checkpoints / "step_000004", best_checkpoint=checkpoints / "step_000002",
                          stopped_by_signal=False, final_eval_loss=1.5, first_eval_loss=2.0, best_step=2,
                          stopped_early=True, overfit_warning={"at_step": 4, "best_step": 2},
                          data_reports={"train": {"kept": 12}})
    result = PipelineResult(run_dir=tmp_path / "run", data_dir=tmp_path / "run" / "data",
                            vocab_path=tmp_path / "run" / "tokenizer" / "vocab.json", training=trained,
                            samples_dir=tmp_path / "run" / "samples")
    summary = json.loads(json.dumps(result.summary()))
    assert set(summary) == SUMMARY_KEYS
    assert summary["last_checkpoint"] == str(checkpoints / "step_000004") and summary["best_step"] == 2
    assert summary["best_checkpoint"] == str(checkpoints / "step_000002")
    assert (summary["first_eval_loss"], summary["final_eval_loss"]) == (2.0, 1.5)
    assert summary["stopped_early"] is True and summary["overfit_warning"] == {"at_step": 4, "best_step": 2}
    assert summary["stopped_by_signal"] is False and not result.stopped_by_signal
    assert result.training is trained  # one object, not copies of its fields


def test_a_stop_before_or_during_training_reads_as_stopped(tmp_path):
    before = PipelineResult(run_dir=tmp_path, data_dir=tmp_path / "data", vocab_path=tmp_path / "vocab.json",
                            stopped_before_training=True)
    assert before.stopped_by_signal and before.training is None
    summary = before.summary()
    assert set(summary) == SUMMARY_KEYS and summary["stopped_by_signal"] is True
    assert summary["last_checkpoint"] is None and summary["stopped_early"] is False
    during = PipelineResult(run_dir=tmp_path, data_dir=tmp_path / "data", vocab_path=tmp_path / "vocab.json",
                            training=TrainResult(step=1, last_checkpoint=None, best_checkpoint=None,
                                                 stopped_by_signal=True, final_eval_loss=None, first_eval_loss=None))
    assert during.stopped_by_signal and during.summary()["stopped_by_signal"] is True
