"""Macs for listening (xtts_ft/speech_device.py): ``--device mps`` for serve, synthesize and the web app's Speak tab,
``auto`` staying on the CPU of a Mac, and training on MPS refused in one line. No Mac here: ``torch.cuda`` and
``torch.backends.mps`` are stood in for."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from xtts_ft import cli
from xtts_ft.config import load_config
from xtts_ft.errors import ConfigError
from xtts_ft.serve.command import pick_device
from xtts_ft.speech_device import speech_device


def backend(available: bool, built: bool = True) -> SimpleNamespace:
    return SimpleNamespace(is_available=lambda: available, is_built=lambda: built)


MAC = {"cuda": backend(False), "mps": backend(True)}


def test_auto_keeps_the_cpu_on_a_mac_and_mps_is_used_only_when_asked_for():
    assert speech_device(None, **MAC) == "cpu"
    assert speech_device("auto", **MAC) == "cpu"
    assert speech_device("mps", **MAC) == "mps"
    assert speech_device("MPS ", **MAC) == "mps"
    assert speech_device("cpu", **MAC) == "cpu"
    assert speech_device(None, cuda=backend(True), mps=backend(False)) == "cuda"  # a GPU machine: unchanged
    assert speech_device("cuda:1", cuda=backend(True), mps=backend(False)) == "cuda:1"


@pytest.mark.parametrize("mps, says", [
    (backend(False, built=True), "it needs a Mac with Apple silicon"),
    (backend(False, built=False), "this torch was built without it"),
])
def test_mps_where_torch_sees_none_is_refused_with_what_to_use(mps, says):
    with pytest.raises(ConfigError, match=f"--device mps: torch sees no Apple GPU here \\({says}.*use --device cpu"):
        speech_device("mps", cuda=backend(False), mps=mps)


def test_cuda_without_a_gpu_and_an_unknown_device_are_refused():
    with pytest.raises(ConfigError, match="--device cuda: no CUDA device is visible here; use --device cpu"):
        speech_device("cuda", **MAC)
    with pytest.raises(ConfigError, match="--device tpu: choose one of auto, cpu, cuda, cuda:N or mps"):
        speech_device("tpu", **MAC)


def test_serve_asks_the_same_question_of_this_machines_torch():
    assert pick_device("cpu") == "cpu"
    with pytest.raises(ConfigError, match="--device mps: torch sees no Apple GPU here"):  # no Mac here
        pick_device("mps")


def test_the_command_line_lets_missing_mps_operators_run_on_the_cpu_before_torch_loads():
    for command in (["serve", "--model", "m"], ["synthesize", "--model", "m", "--text", "t", "--speaker-wav", "w",
                                                  "--out", "o.wav"], ["ui"]):
        args = cli.build_parser().parse_args([*command, "--device", "mps"])
        environ: dict = {}
        cli.mps_fallback(args, environ)
        assert environ == {"PYTORCH_ENABLE_MPS_FALLBACK": "1"}, command
    kept = {"PYTORCH_ENABLE_MPS_FALLBACK": "0"}  # the user's own setting stays
    cli.mps_fallback(cli.build_parser().parse_args(["ui", "--device", "mps"]), kept)
    assert kept == {"PYTORCH_ENABLE_MPS_FALLBACK": "0"}
    untouched: dict = {}
    cli.mps_fallback(cli.build_parser().parse_args(["ui", "--device", "cpu"]), untouched)
    assert untouched == {}


def test_the_speak_tab_opens_its_engine_on_the_device_ui_was_given(monkeypatch, tmp_path: Path):
    from xtts_ft.webapp import speak as speak_module

    devices = []

    def open_on(source, device, **kw):  # a stand-in engine: only the device it was opened on matters here
        devices.append(device)
        return object()

    monkeypatch.setattr(speak_module.SpeechEngine, "open", open_on)
    monkeypatch.setattr(speak_module, "resolve_model", lambda model: model)
    speak_module.EngineHolder("mps").get(tmp_path / "model", speak_module.SpeakSettings(0.7, None))
    speak_module.EngineHolder().get(tmp_path / "other", speak_module.SpeakSettings(0.7, None))
    assert devices == ["mps", "cpu"]  # without --device: CUDA when visible, else the CPU (this machine has none)


def test_training_on_mps_is_refused_in_one_line_saying_why_and_what_to_do():
    with pytest.raises(ConfigError) as refused:
        load_config("configs/demo.yaml", ["run.device=mps"])
    lines = str(refused.value).splitlines()
    assert len(lines) == 1
    assert "run.device=mps: mps: training on Apple's GPU is not supported: torch has no NCCL there" in lines[0]
    assert "train on a CUDA machine" in lines[0] and "--device mps" in lines[0]
