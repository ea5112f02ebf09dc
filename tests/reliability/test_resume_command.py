"""The resume command printed after a stop, run exactly as printed, continues the same run at the same step.

A real ``headless_train.py`` process with overrides (``--set``, ``--max-steps``) and the options that
start a run (``--resume never --archive-old-run``) gets SIGTERM; both lines that say how to resume
must print the same command, keep every override and drop what would start yet another run.
"""

from __future__ import annotations

import json
import shlex
import shutil
import signal
import subprocess
import sys
import time

import yaml

from tests.reliability.relhelpers import REPO, read_events
from xtts_ft.checkpoint_store import CheckpointRecord, CheckpointStore
from xtts_ft.run_folder import read_record
from xtts_ft.train.stopping import resume_command

DEMO = REPO / "datasets" / "amharic_demo"


def test_resume_command_drops_only_what_starts_another_run():
    argv = ["--config", "c.yaml", "--set", "training.lr=2e-3", "--resume", "never", "--archive-old-run",
            "--set", "checkpoint.resume=never", "--max-steps", "40", "--resume=auto", "--set=evaluation.every_steps=5"]
    assert resume_command(["python", "headless_train.py"], argv, "never") == (
        "python headless_train.py --config c.yaml --set training.lr=2e-3 --max-steps 40 "
        "--set=evaluation.every_steps=5 --resume auto")
    assert resume_command(["python", "-m", "xtts_ft", "train"], ["--config", "my runs/c.yaml"], "auto") == \
        "python -m xtts_ft train --config 'my runs/c.yaml'"


def test_the_printed_resume_command_continues_the_same_run(tmp_path, tiny_base):
    ws = tmp_path
    rows = (DEMO / "metadata.csv").read_text(encoding="utf-8").splitlines()
    (ws / "data" / "wavs").mkdir(parents=True)
    for row in rows[1:9]:
        shutil.copyfile(DEMO / row.split("|")[0], ws / "data" / row.split("|")[0])
    (ws / "data" / "metadata.csv").write_text("\n".join(rows[:9]) + "\n", encoding="utf-8")
    config = {
        "run": {"output_dir": str(ws / "run"), "device": "cpu"},
        "base_model": {"source": str(tiny_base.root)},
        # no short clips cut by alignment and no recognising of samples: what is tested never reads them
        "dataset": {"path": str(ws / "data"), "format": "coqui", "eval_fraction": 0.25, "num_workers": 1,
                    "short_clips": "off"},
        "tokenizer": {"new_tokens": 600},
        "training": {"batch_size": 2, "num_workers": 0, "warmup_steps": 1, "log_every": 1,
                     "min_conditioning_s": 0.5, "max_conditioning_s": 1.5},
        "precision": {"mode": "fp32"},
        "evaluation": {"every_steps": 0, "eval_at_start": False, "sentences": ["ሰላም"], "max_new_tokens": 4,
                       "mcd_clips": 0, "max_speakers": 1, "recognize": False, "quality": False},
        "asr": {"model": str(REPO / "xtts_ft" / "asr" / "small_model")},  # the committed recogniser: no download
    }
    (ws / "c.yaml").write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
    run = ws / "run"
    first = [sys.executable, "headless_train.py", "--config", str(ws / "c.yaml"), "--set", "training.lr=2e-3",
             "--max-steps", "30", "--resume", "never", "--archive-old-run", "--set", "checkpoint.every_steps=100"]
    log = ws / "first.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(first, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.time() + 300
            while True:
                assert proc.poll() is None and time.time() < deadline, log.read_text()[-3000:]
                lines = (run / "metrics.jsonl").read_text().splitlines() if (run / "metrics.jsonl").exists() else []
                if any(json.loads(x).get("step", 0) >= 2 for x in lines if x.strip()):
                    break
                time.sleep(0.1)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=120) == 0, log.read_text()[-3000:]
        finally:
            proc.kill()
    text = log.read_text()
    printed = [line.split("Resume with: ", 1)[1] for line in text.splitlines() if "Resume with: " in line]
    closing = [line.split("resume with: ", 1)[1] for line in text.splitlines() if "stopped early; resume with: " in line]
    assert len(printed) == 1 and closing == printed, text[-3000:]
    command = printed[0]
    assert "--set training.lr=2e-3" in command and "--max-steps 30" in command
    assert "--set checkpoint.every_steps=100" in command
    assert "never" not in command and "--archive-old-run" not in command
    saved = CheckpointStore.of_run(run).latest()
    step = CheckpointRecord.read(saved).step
    run_id = read_record(run).run_id
    assert 2 <= step < 30

    again = subprocess.run(shlex.split(command), cwd=REPO, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resuming from {saved} at step {step}" in again.stderr
    assert read_record(run).run_id == run_id and not (run / "old_runs").exists()  # the same run, nothing set aside
    steps = [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()
             if x.strip() and "loss" in json.loads(x) and json.loads(x).get("split") != "eval"]
    assert steps == list(range(1, 31))  # every step once: continued at the saved step, not restarted
    stops = [e for e in read_events(run) if e["event"] == "stop"]
    assert len(stops) == 1 and stops[0]["resume_command"] == command
