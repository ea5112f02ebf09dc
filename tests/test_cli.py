"""The command lines: every command has --help, and user mistakes are one line without a traceback."""

from __future__ import annotations

import json
import logging
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


def test_every_registered_command_has_help_in_process(capsys):
    """Every subcommand the parser registers (serve, publish, ui, ingest, ... as they are added) answers --help;
    the subprocess test above covers the original ones end to end."""
    import argparse

    from xtts_ft.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    names = sorted(sub.choices)
    assert {"serve", "publish", "ui", "ingest", "transcribe", "score", *COMMANDS} <= set(names)
    for name in names:
        with pytest.raises(SystemExit) as done:
            parser.parse_args([name, "--help"])
        assert done.value.code == 0
        assert "usage: xtts-ft " + name in capsys.readouterr().out


HEAVY = ("torch", "TTS", "transformers", "fastapi", "gradio")

# Runs in a fresh interpreter: each entry point as a user starts it (runpy, with its own sys.argv) answers
# --help; after each one, which of HEAVY it loaded.
HELP_PROBE = """
import contextlib, io, json, runpy, sys
from xtts_ft.cli import COMMANDS
heavy = %r
found = {}
for argv in [["headless_train.py", "--help"], ["xtts_ft", "--help"]] + [["xtts_ft", name, "--help"] for name in COMMANDS]:
    sys.argv = list(argv)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        if argv[0] == "headless_train.py":
            runpy.run_path("headless_train.py", run_name="__main__")
        else:
            runpy.run_module("xtts_ft", run_name="__main__", alter_sys=True)
    found[" ".join(argv)] = [out.getvalue().startswith("usage: "), [m for m in heavy if m in sys.modules]]
print(json.dumps(found))
"""


def test_help_of_every_command_loads_no_heavy_package():
    """--help answers from the options alone: the command's module (torch, coqui, ...) is imported after parsing."""
    out = run("-c", HELP_PROBE % (HEAVY,))
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    from xtts_ft.cli import COMMANDS

    assert set(found) == {"headless_train.py --help", "xtts_ft --help", *(f"xtts_ft {name} --help" for name in COMMANDS)}
    assert found == {argv: [True, []] for argv in found}, found  # each printed its usage, nothing heavy loaded


# Runs in a fresh interpreter: a command runs to its end as a user starts it (argv[0] "xtts_ft": python -m xtts_ft,
# else that script); then what it printed, its exit code and which of HEAVY it loaded.
RUN_PROBE = """
import contextlib, io, json, runpy, sys
heavy, argv, stdin = %r, %r, %r
sys.argv, sys.stdin = list(argv), io.StringIO(stdin)
out, err, code = io.StringIO(), io.StringIO(), 0
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    try:
        if argv[0] == "xtts_ft":
            runpy.run_module("xtts_ft", run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as done:
        code = done.code
print(json.dumps([out.getvalue(), err.getvalue(), code, [m for m in heavy if m in sys.modules]]))
"""


def run_probe(*argv: str, stdin: str = "") -> tuple[str, str, int, list[str]]:
    out = run("-c", RUN_PROBE % (HEAVY, list(argv), stdin))
    assert out.returncode == 0, out.stderr
    printed, errors, code, loaded = json.loads(out.stdout)
    return printed, errors, code, loaded


def test_light_commands_run_without_loading_torch_coqui_or_transformers(tmp_path):
    """normalize (text) and prepare (data) load only what they use: no torch, coqui, transformers (seconds each)."""
    printed, errors, code, loaded = run_probe("xtts_ft", "normalize", stdin="ሰላም 12\n")
    assert (printed, code, loaded) == ("ሰላም አስራ ሁለት\n", 0, []), errors

    source = REPO_ROOT / "datasets" / "amharic_demo"
    dataset = tmp_path / "dataset"
    (dataset / "wavs").mkdir(parents=True)
    lines = (source / "metadata.csv").read_text(encoding="utf-8").splitlines()[:4]  # header and three clips
    for line in lines[1:]:
        clip = line.split("|")[0]
        (dataset / clip).write_bytes((source / clip).read_bytes())
    (dataset / "metadata.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    printed, errors, code, loaded = run_probe("xtts_ft", "prepare", "--input", str(dataset), "--out", str(tmp_path / "out"))
    assert code == 0 and (tmp_path / "out" / "metadata_train.csv").is_file() and "3 clips" in printed, errors
    assert loaded == []


@pytest.mark.parametrize("argv", [["headless_train.py", "--config", "configs/demo.yaml", "--set", "training.lr=fast"],
                                  ["xtts_ft", "train", "--config", "configs/demo.yaml", "--set", "training.lr=fast"],
                                  ["xtts_ft", "evaluate", "--config", "configs/demo.yaml", "--set", "training.lr=fast"]])
def test_a_config_mistake_is_answered_before_torch_or_coqui_load(argv):
    """The commands that read a config read it before their module is imported: a mistake costs no heavy import."""
    printed, errors, code, loaded = run_probe(*argv)
    assert errors == "error: --set training.lr=fast: expected float, got 'fast'\n" and code == 2, errors
    assert loaded == []


def test_quieting_transformers_does_not_load_it_and_holds_once_it_is_loaded():
    """setup_logging leaves transformers at errors only, whether it is imported before or after (it resets its level
    when first imported)."""
    code = ("import logging, sys; from xtts_ft.commands.common import setup_logging; setup_logging(None); "
            "print('transformers' in sys.modules); import transformers.utils.logging as hf; "
            "print(hf.get_verbosity() == logging.ERROR, logging.getLogger('transformers').getEffectiveLevel())")
    env = {k: v for k, v in __import__("os").environ.items() if k != "TRANSFORMERS_VERBOSITY"}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                         env=env)
    assert out.stdout.split() == ["False", "True", str(logging.ERROR)], out.stdout + out.stderr


def test_every_row_of_the_table_names_a_run_function_that_exists():
    """The table's "module:function" names are imported only when a command runs: each one resolves."""
    from xtts_ft.cli import COMMANDS, HEADLESS, load_run_function

    runs = {name: load_run_function(command) for name, command in {"headless": HEADLESS, **COMMANDS}.items()}
    assert all(callable(run) for run in runs.values())
    assert runs["make-tiny-model"] is runs["make-random-model"]  # one run function, two command names
    assert len({run for name, run in runs.items() if name != "make-tiny-model"}) == len(runs) - 1


@pytest.mark.parametrize("setting, named", [("run.output_dir=/proc/xtts_ft_run", "/proc/xtts_ft_run"),
                                             ("asr.model=./no/such/recogniser", "does not exist")])
def test_a_run_that_cannot_work_is_one_line_before_torch_or_coqui_load(setting, named):
    """A run folder under /proc (or where this user may not write): one line naming it, not a traceback. A recogniser
    folder that does not exist: with the config's other checks, not after prepare and the tokenizer ran."""
    printed, errors, code, loaded = run_probe("headless_train.py", "--config", "configs/demo.yaml", "--set", setting)
    assert code == 2 and loaded == [] and len(errors.splitlines()) == 1, errors
    assert errors.startswith("error: ") and named in errors and setting.partition("=")[0] in errors


def test_a_second_trainer_is_refused_before_torch_or_coqui_load(tmp_path):
    """The command line locks the run folder right after reading the config: a folder another trainer holds is
    refused in a fraction of a second (not after 28-42 s of imports), with nothing written there."""
    run_dir = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from xtts_ft.run_lock import RunLock; "
                               "RunLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(600)",
                               str(run_dir)], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        before = sorted(run_dir.iterdir())
        for argv in (["headless_train.py"], ["xtts_ft", "train"]):
            printed, errors, code, loaded = run_probe(*argv, "--config", "configs/demo.yaml",
                                                      "--set", f"run.output_dir={run_dir}")
            assert code == 2 and loaded == [] and len(errors.splitlines()) == 1, errors
            assert f"another trainer is using this run folder (pid {holder.pid}," in errors
        assert sorted(run_dir.iterdir()) == before  # no train.log, no config.yaml
    finally:
        holder.kill()
        holder.wait()


def test_the_evaluate_command_takes_a_checkpoint(tmp_path, monkeypatch, capsys):
    """``python -m xtts_ft evaluate --checkpoint CKPT`` evaluates CKPT (the config checks knew no --evaluate)."""
    from xtts_ft.cli import main
    from xtts_ft.commands import training

    asked = []
    monkeypatch.chdir(REPO_ROOT)
    monkeypatch.setattr(training, "evaluate_run", lambda cfg, checkpoint, *_: asked.append((cfg.run_dir, checkpoint)))
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level  # the command sets up its own logging: put pytest's back
    try:
        code = main(["evaluate", "--config", "configs/demo.yaml", "--checkpoint", str(tmp_path / "step_000010"),
                     "--set", f"run.output_dir={tmp_path / 'run'}"])
    finally:
        for handler in root.handlers[:]:
            root.removeHandler(handler)
            if handler not in handlers:
                handler.close()
        for handler in handlers:
            root.addHandler(handler)
        root.setLevel(level)
    assert code == 0 and asked == [(tmp_path / "run", tmp_path / "step_000010")], capsys.readouterr().err


def test_headless_help():
    out = run("headless_train.py", "--help")
    assert out.returncode == 0 and "--config" in out.stdout and "--resume" in out.stdout


def test_missing_config_is_one_line_no_traceback(tmp_path):
    out = run("headless_train.py", "--config", str(tmp_path / "nope.yaml"))
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    expected = f"error: {tmp_path / 'nope.yaml'}: config file not found; pass --config with a YAML file (see configs/)"
    assert out.stderr.strip() == expected


def test_bad_override_lists_every_problem(tmp_path):
    out = run(
        "headless_train.py", "--config", "configs/demo.yaml", "--set", "training.lr=fast", "--set", "precision.mode=fp8"
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert lines == ["error: --set training.lr=fast: expected float, got 'fast'",  # the values given, as typed
                     "error: --set precision.mode=fp8: expected 'auto' | 'bf16' | 'fp16' | 'fp32', got 'fp8'"]


@pytest.mark.parametrize("entry", ["headless", "train", "evaluate"])
def test_config_name_alone_finds_the_projects_configs_folder(entry, tmp_path, monkeypatch, capsys, caplog):
    """`python headless_train.py --config demo.yaml` from any folder reads configs/demo.yaml (and says so)."""
    from xtts_ft.cli import headless_main, main
    from xtts_ft.config.loading import PROJECT_CONFIGS

    monkeypatch.chdir(tmp_path)
    args = ["--config", "demo.yaml", "--set", "training.lr=fast"]  # stops right after the file is read
    with caplog.at_level("INFO", logger="xtts_ft.config.loading"):
        rc = headless_main(args) if entry == "headless" else main([entry, *args])
    err = capsys.readouterr().err
    assert rc == 2 and "config file not found" not in err
    assert "error: --set training.lr=fast: expected float" in err
    assert f"using {PROJECT_CONFIGS / 'demo.yaml'}" in caplog.text


@pytest.mark.parametrize("command", [["make-tiny-model"], ["make-random-model", "--size", "tiny"]])
def test_make_tiny_model_command(tmp_path, command):
    out = run("-m", "xtts_ft", *command, "--out", str(tmp_path / "tiny"))
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "tiny" / "model.pth").is_file() and "RANDOM" in out.stdout
    config = json.loads((tmp_path / "tiny" / "config.json").read_text())
    assert config["model_args"]["gpt_layers"] == 2  # tiny, whichever name was used


def test_expandable_segments_default_is_set_by_the_entry_point_not_at_import():
    from xtts_ft.cli import default_allocator_settings

    env: dict = {}
    default_allocator_settings(env)
    assert env == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    mine = {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128"}
    default_allocator_settings(mine)
    assert mine == {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128"}  # the user's own setting wins
    code = ("import os, torch, xtts_ft.cli as c; print(os.environ.get('PYTORCH_CUDA_ALLOC_CONF')); "
            "c.headless_main(['--config', 'missing.yaml']); "
            "print(os.environ.get('PYTORCH_CUDA_ALLOC_CONF'), torch.cuda.is_initialized())")
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith(("PYTORCH_CUDA_ALLOC", "PYTORCH_ALLOC"))}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                         env=env)
    assert out.stdout.split("\n")[:2] == ["None", "expandable_segments:True False"], out.stdout + out.stderr


def test_header_sets_this_ranks_gpu_before_asking_its_name_and_only_rank_0_prints(monkeypatch, caplog):
    import torch

    from xtts_ft.commands import training
    from xtts_ft.config import Config

    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", lambda i: calls.append(("set_device", i)))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=None: calls.append(("name", i)) or "Tesla T4")
    cfg = Config()
    caplog.set_level("INFO")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    training.print_header(cfg)
    assert calls == [("set_device", 1), ("name", 1)] and "xtts-ft run" not in caplog.text
    calls.clear()
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    training.print_header(cfg)
    assert calls == [("set_device", 0), ("name", 0)] and "cuda (Tesla T4)" in caplog.text
