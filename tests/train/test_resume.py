"""Exact resume (with and without worker processes) and the clean stop on SIGTERM / SIGINT."""

from __future__ import annotations

import os
import signal
import time

import pytest
import torch

from tests.fixtures.scripts import RUN_SMALL
from tests.train.trainhelpers import read_metrics, small_config, train_lines
from xtts_ft.checkpoint_store import CheckpointStore
from xtts_ft.stop_signals import StopSignals

STEPS = 6


def _losses(run) -> dict[int, tuple]:
    return {r["step"]: (r["loss"], r["loss_text_ce"], r["loss_mel_ce"], r["grad_norm"]) for r in train_lines(run)}


@pytest.fixture
def straight(trainer, tmp_path):
    """Per-step losses of an uninterrupted run of STEPS steps (num_workers=0)."""
    run = tmp_path / "straight"
    trainer(small_config(run, training={"max_steps": STEPS}))
    losses = _losses(run)
    assert sorted(losses) == list(range(1, STEPS + 1))
    return losses


@pytest.mark.parametrize("workers", [0, 1])
def test_half_run_plus_resume_gives_the_same_losses(trainer, straight, tmp_path, workers, caplog):
    run = tmp_path / "split"
    cfg = small_config(run, training={"max_steps": STEPS, "num_workers": workers}, checkpoint={"every_steps": 100})
    first = trainer(cfg, max_steps_override=STEPS // 2)
    assert first.step == STEPS // 2 and first.last_checkpoint.name == "step_000003"
    caplog.set_level("INFO")
    torch.manual_seed(999)  # as in a new process: only the checkpoint's RNG states can make the rest identical
    second = trainer(cfg)
    assert second.step == STEPS and "resuming from" in caplog.text and "training.max_steps: 3 -> 6" in caplog.text
    resumed = _losses(run)
    assert sorted(resumed) == list(range(1, STEPS + 1))
    for step in range(1, STEPS + 1):  # bit-for-bit on CPU: same data, crops, dropout masks and optimizer state
        assert resumed[step] == pytest.approx(straight[step], rel=1e-6, abs=1e-7), step
    assert second.first_eval_loss == first.first_eval_loss  # carried over in the checkpoint


def test_sigterm_saves_the_last_finished_step_and_resumes(trainer, straight, tmp_path, caplog):
    run = tmp_path / "run"
    before = signal.getsignal(signal.SIGTERM)

    def send_sigterm(step):
        if step == 1:
            os.kill(os.getpid(), signal.SIGTERM)  # arrives as step 2 (0-based 1) begins: it is abandoned

    caplog.set_level("INFO")
    result = trainer(small_config(run, training={"max_steps": STEPS}), fault_injector=send_sigterm)
    assert result.stopped_by_signal and result.step == 1 and result.last_checkpoint.name == "step_000001"
    assert signal.getsignal(signal.SIGTERM) is before  # handlers restored on exit
    assert "stopped by SIGTERM during step 2 (abandoned after 0 of 1 micro-batches); saved" in caplog.text
    assert "Resume with:" in caplog.text
    assert max(r["step"] for r in train_lines(run)) == 1
    CheckpointStore.load_state(result.last_checkpoint)
    torch.manual_seed(999)
    resumed = trainer(small_config(run, training={"max_steps": STEPS}))
    assert resumed.step == STEPS and not resumed.stopped_by_signal
    losses = _losses(run)
    for step in range(2, STEPS + 1):
        assert losses[step] == pytest.approx(straight[step], rel=1e-6, abs=1e-7), step


def test_sigterm_to_a_training_process(training_forks, script_args, tmp_path):
    """A real process (forked from tests/fixtures/fork_server.py, which imported the training stack once)."""
    run = tmp_path / "run"
    args = script_args(run, sections={"training": {"max_steps": 400}, "checkpoint": {"every_steps": 1000}})
    log = tmp_path / "run.log"
    proc = training_forks.start(RUN_SMALL, args, log=log)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            lines = read_metrics(run) if (run / "metrics.jsonl").exists() else []
            if any(r.get("step", 0) >= 2 for r in lines if "loss" in r):
                break
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=120)
    finally:
        proc.kill()
    out = log.read_text()
    assert rc == 0, out[-3000:]
    assert "stopped_by_signal=True" in out and "Resume with:" in out
    step = int(out.split("RESULT step=")[1].split()[0])
    assert 2 <= step < 400 and CheckpointStore.of_run(run).latest().name == f"step_{step:06d}"


def test_a_second_signal_stops_at_once_and_handlers_are_restored():
    before = signal.getsignal(signal.SIGINT)
    with StopSignals() as stop:
        handler = signal.getsignal(signal.SIGINT)
        assert handler is not before
        handler(signal.SIGINT, None)
        assert stop.requested and stop.signal_name == "SIGINT"
        with pytest.raises(KeyboardInterrupt):
            handler(signal.SIGTERM, None)
    assert signal.getsignal(signal.SIGINT) is before
