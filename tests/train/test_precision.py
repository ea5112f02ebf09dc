"""Precision per card, decided by compute capability with torch.cuda mocked (no GPU here).

torch 2.8's ``torch.cuda.is_bf16_supported()`` answers True on a T4 or V100 because bf16 *runs*
there through emulation; the mocks below answer True to it on every card, so these tests show the
choice does not depend on it.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from tests.conftest import REPO_ROOT
from xtts_ft.errors import ConfigError
from xtts_ft.train import precision
from xtts_ft.train.precision import fallback_policy, resolve_precision

CARDS = {"T4": ("Tesla T4", (7, 5)), "V100": ("Tesla V100-SXM2-16GB", (7, 0)),
         "A100": ("NVIDIA A100-SXM4-80GB", (8, 0)), "L4": ("NVIDIA L4", (8, 9))}
GPU = torch.device("cuda", 0)


@pytest.fixture
def card(monkeypatch):
    def use(model: str) -> None:
        name, capability = CARDS[model]
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
        monkeypatch.setattr(torch.version, "hip", None)

    return use


@pytest.mark.parametrize("model", ["T4", "V100"])
def test_cards_without_native_bf16_train_in_fp16_with_a_scaler_and_refuse_bf16(card, model):
    card(model)
    policy = resolve_precision("auto", GPU)
    assert policy.name == "fp16" and policy.scaler_enabled and policy.dtype == torch.float16
    with pytest.raises(ConfigError) as err:
        resolve_precision("bf16", GPU)
    message = str(err.value)
    assert "\n" not in message and CARDS[model][0] in message and "precision.mode: fp16" in message
    assert "compute capability {}.{}".format(*CARDS[model][1]) in message
    # a collapsing fp16 scale falls back to fp32, never to emulated bf16
    assert fallback_policy(policy, GPU).name == "fp32"


@pytest.mark.parametrize("model", ["A100", "L4"])
def test_ampere_and_newer_choose_bf16_without_a_scaler(card, model):
    card(model)
    policy = resolve_precision("auto", GPU)
    assert policy.name == "bf16" and not policy.scaler_enabled
    assert resolve_precision("bf16", GPU).name == "bf16"
    assert fallback_policy(resolve_precision("fp16", GPU), GPU).name == "bf16"


def test_cpu_is_fp32_and_unaffected_by_the_cuda_answer(card):
    card("A100")
    assert resolve_precision("auto", torch.device("cpu")).name == "fp32"
    assert not precision.cuda_bf16_supported(torch.device("cpu"))


def _benchmark():
    spec = importlib.util.spec_from_file_location("gpu_throughput", REPO_ROOT / "benchmarks" / "gpu_throughput.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_throughput_benchmark_skips_bf16_rows_on_a_t4_and_knows_l4_from_l40s(card, capsys):
    bench = _benchmark()
    card("T4")
    assert bench.runnable_precisions(["fp32", "fp16", "bf16"], GPU) == ["fp32", "fp16"]
    assert "bf16: no native bf16" in capsys.readouterr().out
    card("L4")
    assert bench.runnable_precisions(["fp32", "fp16", "bf16"], GPU) == ["fp32", "fp16", "bf16"]
    assert bench.peak_tflops("NVIDIA L4") == 121.0
    assert bench.peak_tflops("NVIDIA L40S") == 362.0 and bench.peak_tflops("NVIDIA L40") == 181.0
    assert bench.peak_tflops("NVIDIA A100-SXM4-80GB") == 312.0 and bench.peak_tflops("NVIDIA A10G") == 70.0
    assert bench.peak_tflops("Some Future GPU") is None


def test_the_benchmark_scaler_starts_at_the_configured_scale():
    bench = _benchmark()
    torch.manual_seed(0)
    gpt = bench.build_gpt(bench.SMALL, torch.device("cpu"))
    batches = [bench.synthetic_batch(bench.SMALL, 1, text_len=8, codes_len=10, cond_frames=20)] * 3
    for path in ("coqui", "fast"):
        row = bench.measure(gpt, torch.device("cpu"), "fp16", batches, warmup=2, path=path)
        assert row["loss_scale"] == 1024.0  # precision.init_scale, not torch's 65536 (3 clean steps: no growth yet)
