"""Resuming is honest: an older checkpoint starts a branch, a cut-short evaluation is redone, and the
first loss row after a resume averages the same steps as an uninterrupted run's.

Seen before: ``--resume RUN/checkpoints/step_000002`` in a run with steps 4 and 6 overwrote them;
an evaluation abandoned by a stop was never redone (no samples, no report entry, ``best_metric:
cer`` could not pick that step); the first logged loss after a resume averaged only the steps since
the resume.
"""

from __future__ import annotations

import json
import logging
import os
import signal

import pytest
import torch

from tests.reliability.relhelpers import read_events, read_metrics, small_config, train_lines
from xtts_ft.checkpoint_store import CheckpointRecord, CheckpointStore
from xtts_ft.layout import RunLayout
from xtts_ft.run_folder import read_record


def states(folder) -> dict[str, str]:
    return {p.name: CheckpointStore.verify(p).state_sha256 for p in sorted(folder.iterdir())
            if p.name.startswith("step_")}


def sigterm_as_step_begins(stop_before: int):
    """Fault injector: SIGTERM as step ``stop_before`` (1-based) begins, so the step before it is the last one."""
    def inject(step: int):
        if step == stop_before - 1:
            os.kill(os.getpid(), signal.SIGTERM)
        return None
    return inject


def test_a_resume_from_an_older_checkpoint_keeps_the_later_ones(trainer, tmp_path, caplog):
    run = tmp_path / "run"
    trainer(small_config(run, training={"max_steps": 6}, checkpoint={"every_steps": 2, "keep_last": 3}))
    before = states(run / "checkpoints")
    assert sorted(before) == ["step_000002", "step_000004", "step_000006"]
    old_metrics = (run / "metrics.jsonl").read_text(encoding="utf-8")

    older = run / "checkpoints" / "step_000002"
    branch_cfg = small_config(run, training={"max_steps": 4, "lr": 5e-4},
                              checkpoint={"every_steps": 2, "keep_last": 3, "resume": str(older)})
    with caplog.at_level(logging.WARNING, logger="xtts_ft.train.branch"):
        result = trainer(branch_cfg)
    assert result.step == 4 and not result.stopped_by_signal

    (branch,) = (run / "branches").iterdir()
    assert branch.name.endswith("_after_step_000002")
    kept = states(branch / "checkpoints")
    assert kept == {k: before[k] for k in ("step_000004", "step_000006")}  # byte for byte, nothing overwritten
    assert (branch / "metrics.jsonl").read_text(encoding="utf-8") == old_metrics  # the old branch's history
    now = states(run / "checkpoints")
    assert sorted(now) == ["step_000002", "step_000004"] and now["step_000002"] == before["step_000002"]
    assert all(CheckpointRecord.read(p).run_id == read_record(run).run_id for p in (run / "checkpoints").iterdir())
    assert f"moved with their samples to {branch}" in caplog.text and "(4, 6)" in caplog.text
    (event,) = [e for e in read_events(run) if e["event"] == "branch"]
    assert event["step"] == 2 and event["old_branch"] == str(branch) and event["moved_steps"] == [4, 6]
    assert [r["step"] for r in train_lines(run)] == [1, 2, 3, 4]  # the run's own history is the new branch's


def test_the_first_loss_row_after_a_resume_averages_the_same_steps(trainer, tmp_path):
    sections = {"training": {"max_steps": 4, "log_every": 4}, "checkpoint": {"every_steps": 100}}
    straight = tmp_path / "straight"
    trainer(small_config(straight, **sections))
    (want,) = train_lines(straight)

    run = tmp_path / "run"
    stopped = trainer(small_config(run, **sections), fault_injector=sigterm_as_step_begins(3))
    assert stopped.stopped_by_signal and stopped.last_checkpoint.name == "step_000002"
    saved = CheckpointStore.load_state(stopped.last_checkpoint).log_interval
    assert saved["n"] == 2 and saved["finite"] == 2  # steps 1 and 2, not yet logged
    trainer(small_config(run, **sections))
    (got,) = train_lines(run)
    assert got["step"] == want["step"] == 4
    for key in ("loss", "loss_text_ce", "loss_mel_ce"):
        assert got[key] == pytest.approx(want[key], rel=1e-6, abs=1e-7), key


def test_an_evaluation_cut_short_by_a_stop_is_redone_after_the_resume(trainer, dataset, tokenizer, tmp_path):
    from xtts_ft.evaluate import write_report
    from xtts_ft.evaluate.hook import make_eval_hook

    run = tmp_path / "run"
    cfg = small_config(run, training={"max_steps": 4}, evaluation={"every_steps": 2, "sentences": ["the quick fox"],
                                                                   "max_new_tokens": 3, "mcd_clips": 0},
                       checkpoint={"every_steps": 100, "best_metric": "cer", "keep_last": 2})
    speaker = dataset[1].parent / "wavs" / "clip_12.wav"
    real = make_eval_hook(cfg, run, tokenizer, [speaker], [], None)
    calls = []

    def hook(step, model, stop_at=None):
        calls.append(step)
        if step == stop_at:
            os.kill(os.getpid(), signal.SIGTERM)  # synthesis notices it at its next token and abandons the evaluation
        out = real(step, model)
        # no recogniser in this test: a stand-in CER that makes step 2 the best, as it was in the run
        return {**out, "sample_cer": 0.1 if step == 2 else 0.5}

    stopped = trainer(cfg, eval_hook=lambda step, model: hook(step, model, stop_at=2))
    assert stopped.stopped_by_signal and stopped.step == 2 and calls == [2]
    cut = CheckpointRecord.read(stopped.last_checkpoint)
    assert cut.eval_pending is True and cut.eval_metrics is None
    assert not (run / "samples" / "step_000002").exists()

    resumed = trainer(cfg, eval_hook=hook)
    assert not resumed.stopped_by_signal and resumed.step == 4 and calls == [2, 2, 4]
    assert [e["step"] for e in read_events(run) if e["event"] == "eval_redone"] == [2]
    assert [r["step"] for r in read_metrics(run) if r.get("split") == "eval"] == [2, 4]
    assert list((run / "samples" / "step_000002").glob("*.wav"))
    meta = CheckpointRecord.read(run / "checkpoints" / "step_000002")
    assert meta.eval_pending is False and meta.eval_metrics["sample_cer"] == 0.1
    assert resumed.best_checkpoint.name == "step_000002"  # best_metric: cer picks the redone step
    html = write_report(run).read_text(encoding="utf-8")
    assert "samples/step_000002/" in html
    index = RunLayout(run).samples_index.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["step"] for line in index if line.strip()] == [2, 4]


def test_format1_checkpoints_read_without_the_new_fields():
    from pathlib import Path

    folder = Path(__file__).resolve().parents[1] / "assets" / "checkpoint_format1" / "step_000002"
    state = CheckpointStore.load_state(folder)
    assert state.log_interval is None and state.eval_pending is False
    assert torch.is_tensor(next(iter(state.gpt.values())))
