"""The command lines: every command has --help, and user mistakes are one line without a traceback."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

COMMANDS = ["prepare", "tokenizer", "normalize", "train", "evaluate", "synthesize", "export", "make-random-model",
            "make-tiny-model"]


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], cwd=REPO_ROOT, input=stdin, capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command):
    out = run("-m", "xtts_ft", command, "--help")
    assert out.returncode == 0, out.stderr
    assert "usage: xtts-ft " + command in out.stdout


def test_headless_help():
    out = run("headless_train.py", "--help")
    assert out.returncode == 0 and "--config" in out.stdout and "--resume" in out.stdout


def test_missing_config_is_one_line_no_traceback(tmp_path):
    out = run("headless_train.py", "--config", str(tmp_path / "nope.yaml"))
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert out.stderr.strip() == f"error: {tmp_path / 'nope.yaml'}: config file not found; pass --config with a YAML file (see configs/)"


def test_bad_override_lists_every_problem(tmp_path):
    out = run(
        "headless_train.py", "--config", "configs/demo.yaml", "--set", "training.lr=fast", "--set", "precision.mode=fp8"
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("error: configs/demo.yaml: ") for line in lines)


@pytest.mark.parametrize("command", [["make-tiny-model"], ["make-random-model", "--size", "tiny"]])
def test_make_tiny_model_command(tmp_path, command):
    out = run("-m", "xtts_ft", *command, "--out", str(tmp_path / "tiny"))
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "tiny" / "model.pth").is_file() and "RANDOM" in out.stdout
    config = json.loads((tmp_path / "tiny" / "config.json").read_text())
    assert config["model_args"]["gpt_layers"] == 2  # tiny, whichever name was used
