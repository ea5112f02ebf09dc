"""A stop request is acted on within seconds wherever the run is, and the last finished step is what is saved.

Two real processes (forked from tests/fixtures/fork_server.py) get SIGTERM while the evaluation synthesises
samples (the step-0 evaluation of an untrained model, whose samples run to the length limit, and a later
one): each exits within 5 s,
with the last finished step saved, the half-done evaluation dropped and the stop in events.jsonl.
In-process: a stop between the micro-batches of a step abandons that step, and the run resumes
from the step before it with the same losses as an uninterrupted run.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import torch

from tests.fixtures.fork_server import ForkServer
from tests.fixtures.scripts import RUN_SMALL
from tests.reliability.relhelpers import read_events, read_metrics, small_config, train_lines
from xtts_ft.checkpoint_store import CheckpointStore

SENTENCES = ["the quick brown fox", "jumps over the lazy dog", "she sells sea shells", "by the sea shore",
             "peter piper picked a peck", "of pickled peppers"]
STOP_WITHIN_S = 5.0


def stop_during_evaluation(forks: ForkServer, script_args, dataset, run: Path, eval_step: int,
                           sections: dict) -> tuple[int, str, float]:
    """Start a training process, SIGTERM it once the evaluation at ``eval_step`` synthesises; (rc, output, seconds)."""
    speaker = dataset[1].parent / "wavs" / "clip_12.wav"
    evaluation = {"sentences": SENTENCES, "mcd_clips": 0, **sections.pop("evaluation", {})}
    args = script_args(run, sections={"evaluation": evaluation, **sections}, speaker_wav=speaker)
    log = run.parent / f"{run.name}.log"
    samples = run / "samples" / f"step_{eval_step:06d}"
    proc = forks.start(RUN_SMALL, args, log=log)
    try:
        deadline = time.time() + 240
        while not samples.is_dir():  # made just before the first sample is generated
            assert proc.poll() is None and time.time() < deadline, log.read_text()[-3000:]
            time.sleep(0.05)
        time.sleep(0.3)  # inside the first sample's generation
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=120)
        seconds = time.monotonic() - sent
        print(f"SIGTERM during the evaluation at step {eval_step}: the process exited {seconds:.2f} s later")
    finally:
        proc.kill()
    return rc, log.read_text(), seconds


def stop_events(run: Path) -> list[dict]:
    return [e for e in read_events(run) if e["event"] == "stop"]


def test_sigterm_during_the_step0_evaluation_exits_within_seconds(training_forks, script_args, dataset, tmp_path):
    run = tmp_path / "run"
    rc, out, seconds = stop_during_evaluation(
        training_forks, script_args, dataset, run, 0,
        {"training": {"max_steps": 50}, "evaluation": {"eval_at_start": True, "every_steps": 0}})
    assert rc == 0, out[-3000:]
    assert seconds < STOP_WITHIN_S, (seconds, out[-6000:])
    assert "stopped by SIGTERM during the evaluation at step 0; nothing new to save" in out
    assert "Resume with:" in out
    assert CheckpointStore.of_run(run).list() == []  # nothing was trained, so nothing was saved
    assert not (run / "samples" / "step_000000").exists()  # no half evaluation left behind
    (event,) = stop_events(run)
    assert event["step"] == 0 and event["signal"] == "SIGTERM" and event["during"] == "the evaluation at step 0"


def test_sigterm_during_a_later_evaluation_saves_that_step_first(training_forks, script_args, dataset, tmp_path):
    run = tmp_path / "run"
    rc, out, seconds = stop_during_evaluation(
        training_forks, script_args, dataset, run, 2,
        {"training": {"max_steps": 50}, "evaluation": {"every_steps": 2}, "checkpoint": {"every_steps": 100}})
    assert rc == 0, out[-3000:]
    assert seconds < STOP_WITHIN_S, (seconds, out[-6000:])
    latest = CheckpointStore.of_run(run).latest()
    assert latest is not None and latest.name == "step_000002"  # the last finished step
    assert CheckpointStore.load_state(latest).step == 2
    assert max(r["step"] for r in train_lines(run)) == 2
    assert not [r for r in read_metrics(run) if r.get("split") == "eval" and r["step"] == 2]  # dropped, not half
    assert not (run / "samples" / "step_000002").exists()
    (event,) = stop_events(run)
    assert event["step"] == 2 and event["during"] == "the evaluation at step 2"
    assert event["checkpoint"] == str(latest)


def test_a_stop_between_micro_batches_abandons_the_step_and_resumes_exactly(trainer, tmp_path):
    sections = {"training": {"max_steps": 4, "grad_accum_steps": 3}, "checkpoint": {"every_steps": 100}}
    straight = tmp_path / "straight"
    trainer(small_config(straight, **sections))
    want = {r["step"]: r["loss"] for r in train_lines(straight)}

    run = tmp_path / "run"

    def sigterm_inside_step_2(step):
        if step == 1:  # called as step 2 (0-based 1) begins, before its first micro-batch
            os.kill(os.getpid(), signal.SIGTERM)

    stopped = trainer(small_config(run, **sections), fault_injector=sigterm_inside_step_2)
    assert stopped.stopped_by_signal and stopped.step == 1 and stopped.last_checkpoint.name == "step_000001"
    (event,) = stop_events(run)
    assert event["during"] == "step 2 (abandoned after 0 of 3 micro-batches)"
    torch.manual_seed(4321)  # as in a new process: only the checkpoint's state may decide the rest
    resumed = trainer(small_config(run, **sections))
    assert resumed.step == 4 and not resumed.stopped_by_signal
    got = {r["step"]: r["loss"] for r in train_lines(run)}
    assert sorted(got) == [1, 2, 3, 4]
    for step in (2, 3, 4):
        assert got[step] == pytest.approx(want[step], rel=1e-6, abs=1e-7), step


def test_a_stop_inside_the_batch_size_probe_ends_it_at_once(trainer, tmp_path, monkeypatch):
    """The probe tries real training steps (seconds each on a GPU); a stop ends it before the next try.

    (A stop that arrives earlier in setup is noticed once the DVAE code cache is done, before the probe:
    tests/reliability/test_stop_stages.py.)"""
    from xtts_ft.train import memory

    monkeypatch.setattr(memory, "_will_probe", lambda probe, device: True)  # the CPU is never probed otherwise
    tries = []

    def first_try_then_sigterm(*args, **kwargs):
        tries.append(1)
        os.kill(os.getpid(), signal.SIGTERM)  # arrives during the probe's first try, which "fits"

    monkeypatch.setattr(memory, "probe_step", first_try_then_sigterm)
    run = tmp_path / "run"
    result = trainer(small_config(run, training={"batch_size": "auto"}))
    assert result.stopped_by_signal and result.step == 0 and tries == [1]  # no second try
    assert CheckpointStore.of_run(run).list() == []
    (event,) = stop_events(run)
    assert event["during"] == "the batch-size probe" and event["checkpoint"] is None
