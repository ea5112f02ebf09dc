"""A stop in any stage before training ends cleanly, and its resume command finishes the same run.

One process (``scripts/stop_at_stage.py``, in a session of its own) runs ``headless_train.py`` on 8
demo clips once uninterrupted, and once as a chain: stopped in prepare (Ctrl-C to the whole process
group while prepare's two workers run), its printed ``Resume with:`` command stopped just after the
tokenizer, that one's stopped as the DVAE code cache starts, that one's inside the batch-size probe,
and the last resume command run to the end. Seen before: SIGTERM in the code cache ended in a
FileNotFoundError traceback (exit 1), SIGTERM in prepare or after the tokenizer killed the process
silently (exit 143), and Ctrl-C in prepare printed a KeyboardInterrupt traceback from every worker.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
import torch
import yaml

from tests.fixtures.scripts import STOP_AT_STAGE, script_command, script_env
from tests.reliability.relhelpers import REPO, read_events
from xtts_ft.checkpoint_store import CheckpointStore

pytestmark = pytest.mark.slow  # headless_train.py stopped in every stage, then resumed

DEMO = REPO / "datasets" / "amharic_demo"
STAGES = {"prepare": "prepare", "tokenizer": "the tokenizer", "codes": "the DVAE code cache",
          "probe": "the batch-size probe"}
MAX_STEPS = 2


def write_config(ws, tiny_base):
    rows = (DEMO / "metadata.csv").read_text(encoding="utf-8").splitlines()
    (ws / "data" / "wavs").mkdir(parents=True)
    for row in rows[1:9]:
        shutil.copyfile(DEMO / row.split("|")[0], ws / "data" / row.split("|")[0])
    (ws / "data" / "metadata.csv").write_text("\n".join(rows[:9]) + "\n", encoding="utf-8")
    config = {
        "run": {"output_dir": str(ws / "unused"), "device": "cpu"},
        "base_model": {"source": str(tiny_base.root)},
        # no short clips cut by alignment and no recognising of samples: what is tested never reads them
        "dataset": {"path": str(ws / "data"), "format": "coqui", "eval_fraction": 0.25, "num_workers": 1,
                    "short_clips": "off"},
        "tokenizer": {"new_tokens": 600},
        "training": {"batch_size": "auto", "num_workers": 0, "warmup_steps": 1, "log_every": 1, "lr": 2e-3,
                     "max_steps": MAX_STEPS, "min_conditioning_s": 0.5, "max_conditioning_s": 1.5},
        "checkpoint": {"every_steps": 100},
        "precision": {"mode": "fp32"},
        "evaluation": {"every_steps": 0, "eval_at_start": False, "sentences": ["ሰላም"], "max_new_tokens": 2,
                       "mcd_clips": 0, "max_speakers": 1, "recognize": False, "quality": False},
        "asr": {"model": str(REPO / "xtts_ft" / "asr" / "small_model")},  # the committed recogniser: no download
    }
    path = ws / "c.yaml"
    path.write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def stage_stops(tmp_path_factory, tiny_base):
    ws = tmp_path_factory.mktemp("stages")
    config = write_config(ws, tiny_base)
    common = ["--config", str(config), "--set", "training.cpu_threads=1"]
    workers = ["--set", "dataset.num_workers=2"]  # prepare worker processes that a Ctrl-C reaches too
    cases = [{"id": "straight", "stops": [], "argv": [*common, "--set", f"run.output_dir={ws / 'straight'}"]},
             {"id": "chain", "stops": list(STAGES),
              "argv": [*common, *workers, "--set", f"run.output_dir={ws / 'chain'}"]},
             {"id": "prepare_command", "command": "xtts_ft", "stops": ["prepare"],  # two workers: every core
              "argv": ["prepare", "--input", str(ws / "data"), "--out", str(ws / "prepared")]}]
    (ws / "cases.json").write_text(json.dumps(cases), encoding="utf-8")
    proc = subprocess.run(script_command(STOP_AT_STAGE, ws / "cases.json", ws / "results.json"),
                          cwd=REPO, env=script_env(), capture_output=True, text=True, timeout=900,
                          start_new_session=True)  # the Ctrl-C of the prepare stop goes to its own group only
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = {r["id"]: r["runs"] for r in json.loads((ws / "results.json").read_text(encoding="utf-8"))}
    return ws, results, proc.stderr


def final_weights(run):
    latest = CheckpointStore.of_run(run).latest()
    assert latest is not None and latest.name == f"step_{MAX_STEPS:06d}", latest
    return CheckpointStore.load_state(latest).gpt


@pytest.mark.parametrize("index,stage", list(enumerate(STAGES)))
def test_a_stop_in_each_stage_is_clean_and_prints_the_command_that_continues(stage_stops, index, stage):
    ws, results, _ = stage_stops
    runs = results["chain"]
    assert len(runs) == len(STAGES) + 1, [r["stop"] for r in runs]
    run, resumed = runs[index], runs[index + 1]
    assert run["stop"] == stage
    err = run["stderr"]
    assert run["rc"] == 0, err[-4000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-4000:]
    signal_name = "SIGINT" if stage == "prepare" else "SIGTERM"
    assert f"stopped by {signal_name} during {STAGES[stage]}; nothing new to save. Resume with: " in err, err[-3000:]
    assert "stopped early; resume with: " in err  # the closing line says the same
    # the printed command is the one started with (nothing in it starts another run)
    assert resumed["argv"] == runs[0]["argv"]
    stops = [e for e in read_events(ws / "chain") if e["event"] == "stop"]
    assert stops[index]["during"] == STAGES[stage] and stops[index]["signal"] == signal_name
    assert stops[index]["checkpoint"] is None


def test_the_resumed_run_finishes_with_the_weights_of_an_uninterrupted_one(stage_stops):
    ws, results, _ = stage_stops
    (straight,), last = results["straight"], results["chain"][-1]
    assert straight["rc"] == 0 and last["stop"] == "none" and last["rc"] == 0, last["stderr"][-4000:]
    assert "Traceback" not in last["stderr"]
    assert len([e for e in read_events(ws / "chain") if e["event"] == "stop"]) == len(STAGES)
    want, got = final_weights(ws / "straight"), final_weights(ws / "chain")
    assert sorted(got) == sorted(want)
    for key in want:
        assert torch.equal(got[key], want[key]), key


def test_prepare_workers_print_no_traceback_on_ctrl_c(stage_stops):
    """Worker processes write to the process's own stderr (not captured per run): nothing of theirs shows."""
    _ws, _results, process_stderr = stage_stops
    assert "Traceback" not in process_stderr and "KeyboardInterrupt" not in process_stderr, process_stderr[-4000:]


def test_the_prepare_command_stops_the_same_way(stage_stops):
    """``python -m xtts_ft prepare`` honours Ctrl-C too; its resume command is itself, and it finishes."""
    ws, results, _ = stage_stops
    stopped, again = results["prepare_command"]
    assert stopped["rc"] == 0 and "Traceback" not in stopped["stderr"], stopped["stderr"][-3000:]
    assert "stopped by SIGINT during prepare; what it finished is kept. Resume with: " in stopped["stderr"]
    assert again["argv"] == stopped["argv"]
    assert again["rc"] == 0, again["stderr"][-3000:]
    assert len((ws / "prepared" / "metadata_train.csv").read_text(encoding="utf-8").splitlines()) >= 2


def test_one_handler_for_the_whole_command():
    """train() inside a command enters the command's StopSignals again: the handlers stay until the command ends."""
    import signal
    import threading

    from xtts_ft.stop_signals import StopSignals, held_while_starting_workers, stop_requested

    before = signal.getsignal(signal.SIGTERM)
    with StopSignals() as command:
        handler = signal.getsignal(signal.SIGTERM)
        with StopSignals.shared() as inner:
            assert inner is command
        assert signal.getsignal(signal.SIGTERM) is handler  # still the command's after train() returned
        with held_while_starting_workers():  # a worker started here would inherit the signal held back
            # the hold blocks the signals in the thread that starts the workers (what they inherit); a signal sent
            # to the whole process (os.kill) may be delivered through another thread of it (torch's, pytest's),
            # so the signal is sent to this thread: it stays pending, not handled
            assert signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, [])
            signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)
            assert signal.SIGTERM in signal.sigpending()
            assert not stop_requested()
        assert signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, [])
        assert stop_requested() and command.signal_name == "SIGTERM"  # delivered once the workers were started
    assert signal.getsignal(signal.SIGTERM) is before and not stop_requested()
