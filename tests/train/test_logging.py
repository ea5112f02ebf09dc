"""What a user sees: the LR schedule in metrics.jsonl and TensorBoard, eval lines, the eval hook, console lines."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest

from tests.train.trainhelpers import REPO, read_events, read_metrics, small_config, train_lines
from xtts_ft.checkpoint_store import CheckpointStore


def test_metrics_show_warmup_eval_hook_and_accumulation(trainer, tmp_path, caplog):
    run = tmp_path / "run"
    calls = []

    def eval_hook(step, model):
        calls.append((step, type(model).__name__, model.gpt.training))
        return {"sample_seconds": 1.5, "ignored": "text"}

    caplog.set_level(logging.INFO)
    cfg = small_config(run, training={"max_steps": 6, "warmup_steps": 6, "log_every": 2, "grad_accum_steps": 2},
                       evaluation={"every_steps": 4, "eval_at_start": True})
    result = trainer(cfg, eval_hook=eval_hook)
    lines = train_lines(run)
    assert [r["step"] for r in lines] == [2, 4, 6]
    assert [r["lr"] for r in lines] == pytest.approx([2e-3 / 6, 4e-3 / 6, 1e-3])  # linear warm-up over 6 steps
    for key in ("loss", "loss_text_ce", "loss_mel_ce", "lr", "grad_norm", "loss_scale", "skipped_steps",
                "samples_per_s", "eta_s"):
        assert key in lines[0]
    evals = [r for r in read_metrics(run) if r.get("split") == "eval"]
    assert [r["step"] for r in evals] == [0, 4, 6]
    for r in evals:
        assert {"eval_loss", "eval_loss_text_ce", "eval_loss_mel_ce"} <= set(r) and r["sample_seconds"] == 1.5
    assert "ignored" not in evals[0]
    assert calls == [(0, "XttsTrainingModel", False), (4, "XttsTrainingModel", False), (6, "XttsTrainingModel", False)]
    assert result.first_eval_loss == evals[0]["eval_loss"] and result.final_eval_loss == evals[-1]["eval_loss"]
    assert "effective batch 4" in caplog.text and "samples/s" in caplog.text and "eta" in caplog.text
    state = CheckpointStore.load_state(result.last_checkpoint)
    assert state.sampler["batch_index"] + 6 * state.sampler["epoch"] == 12  # 2 micro-batches per step

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run / "tensorboard"))
    acc.Reload()
    lr = [e.value for e in acc.Scalars("train/lr")]
    assert len(lr) == 6 and lr == sorted(lr) and lr[0] < lr[-1]  # every step, rising through warm-up
    assert len(acc.Scalars("train/grad_norm")) == 6 and len(acc.Scalars("eval/loss")) == 3
    assert "TTS.tts.layers.xtts.trainer.dataset" not in sys.modules  # never imported (it sets torch threads)


def test_a_failing_eval_hook_is_reported_and_training_goes_on(trainer, tmp_path, caplog):
    def broken_hook(step, model):
        raise RuntimeError("synthesis exploded")

    run = tmp_path / "run"
    result = trainer(small_config(run, training={"max_steps": 2}), eval_hook=broken_hook)
    assert result.step == 2 and result.last_checkpoint is not None and result.final_eval_loss is not None
    assert "eval hook failed at step 2" in caplog.text and "synthesis exploded" in caplog.text
    assert [e["event"] for e in read_events(run)][0] == "eval_hook_failed"


def test_importing_the_package_changes_nothing_global():
    code = (
        "import signal, torch; n = torch.get_num_threads(); h = signal.getsignal(signal.SIGTERM); "
        "import xtts_ft.train, xtts_ft.train.loop, xtts_ft.train.data, xtts_ft.train.distributed; "
        "assert torch.get_num_threads() == n and signal.getsignal(signal.SIGTERM) is h; "
        "import sys; assert not any(m.startswith('TTS.tts.layers.xtts.trainer') for m in sys.modules); print('clean')"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "clean", out.stderr[-2000:]


def test_a_resumed_run_logs_each_step_once(tmp_path):
    """Steps logged after the checkpoint a run resumes from are trained again: their old lines and curves go."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.tensorboard import SummaryWriter

    from xtts_ft.config import StabilityConfig
    from xtts_ft.train.metrics import MetricsLogger
    from xtts_ft.train.stability import StabilityGuard, StepStats

    old = [json.dumps({"step": s, "loss": 9.0}) for s in range(1, 6)] + [json.dumps({"step": 4, "split": "eval"})]
    (tmp_path / "metrics.jsonl").write_text("\n".join(old) + '\n{"step": 6, "lo', encoding="utf-8")  # cut by a kill
    with SummaryWriter(str(tmp_path / "tensorboard")) as tb:
        for s in range(1, 6):
            tb.add_scalar("train/loss", 9.0, s)
    # The earlier run's file as a real earlier run names it: an earlier second. Files are read in name order, and
    # two writers of one process in one second differ only in a process-wide counter ("...9" sorts after "...10").
    [old_file] = (tmp_path / "tensorboard").iterdir()
    start = "events.out.tfevents."
    stamp, rest = old_file.name[len(start):].split(".", 1)
    old_file.rename(old_file.with_name(f"{start}{int(stamp) - 1:010d}.{rest}"))

    logger = MetricsLogger(tmp_path, enabled=True, max_steps=6, start_step=3, log_every=1)
    guard = StabilityGuard(StabilityConfig())
    stats = StepStats(loss=1.0, loss_text_ce=0.5, loss_mel_ce=0.9, finite_losses=2, expected_losses=2, grad_norm=0.1,
                      loss_scale=1.0, stop_requested=False)
    logger.train_step(4, stats, lr=1e-3, guard=guard, precision="fp32", epoch=0, samples=2, seconds=0.1)
    logger.close()

    steps = [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    curve = {e.step: e.value for e in acc.Scalars("train/loss")}
    assert curve == {1: 9.0, 2: 9.0, 3: 9.0, 4: 1.0}


def test_compile_time_is_shown_and_the_eta_counts_it(tmp_path, caplog):
    """training.compile: a step's compile seconds are not projected over the steps left (a one-off), the compiles
    still expected are added, and the line says how long compiling took."""
    from xtts_ft.config import StabilityConfig
    from xtts_ft.train.metrics import MetricsLogger
    from xtts_ft.train.stability import StabilityGuard, StepStats

    logger = MetricsLogger(tmp_path, enabled=True, max_steps=102, start_step=0, log_every=2)
    guard = StabilityGuard(StabilityConfig())
    stats = StepStats(loss=1.0, loss_text_ce=0.5, loss_mel_ce=0.9, finite_losses=2, expected_losses=2, grad_norm=0.1,
                      loss_scale=1.0, stop_requested=False)
    common = dict(lr=1e-3, guard=guard, precision="fp32", epoch=0, samples=2)
    with caplog.at_level(logging.INFO, logger="xtts_ft.train.metrics"):
        logger.train_step(1, stats, seconds=31.0, compile_s=30.0, compile_pending_s=60.0, **common)
        logger.train_step(2, stats, seconds=1.0, compile_pending_s=60.0, **common)
        logger.train_step(3, stats, seconds=1.0, **common)
        logger.train_step(4, stats, seconds=1.0, **common)
    logger.close()
    first, second = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert first["eta_s"] == pytest.approx(1.0 * 100 + 60.0) and first["compile_s"] == 30.0
    assert second["eta_s"] == pytest.approx(1.0 * 98) and "compile_s" not in second
    assert "compiling 30.0 s" in caplog.records[0].getMessage()
    assert "compiling" not in caplog.records[1].getMessage()
