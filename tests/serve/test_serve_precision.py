"""Half precision and decode graphs for the engine: granted on CUDA only, bf16 only with native support, fp32 and
no graphs by default."""

from __future__ import annotations

import pytest
import torch

from xtts_ft.config import ServeConfig
from xtts_ft.errors import ConfigError
from xtts_ft.serve.precision import EnginePrecision, choose_precision

CUDA = torch.device("cuda", 0)  # a device object only: nothing runs on it


def test_the_defaults_are_fp32_everywhere_with_graphs_on_cuda():
    """What the H200 measurements chose: fp32 decode and vocoder (bf16 paid only at many rows, fp16 HiFiGAN was
    slower), the decode step from CUDA graphs on a card."""
    for device in (torch.device("cpu"), CUDA):
        chosen = choose_precision(device, ServeConfig.decode_precision, ServeConfig.vocoder_precision,
                                  ServeConfig.decode_graphs, bf16_supported=lambda _d: True)
        on_card = device.type == "cuda"
        assert chosen == EnginePrecision(graphs=on_card)
        assert chosen.describe() == f"decode fp32{' (CUDA graphs)' if on_card else ''}, vocoder fp32"


def test_the_cpu_never_runs_in_half_precision_and_says_so():
    chosen = choose_precision(torch.device("cpu"), "bf16", "fp16", bf16_supported=lambda _d: True)
    assert chosen.decode is None and chosen.vocoder is None
    assert chosen.notes == ("decode precision bf16 is for CUDA; on cpu the decode runs in fp32",
                            "vocoder precision fp16 is for CUDA; on cpu the vocoder runs in fp32")
    with chosen.vocoding():  # no autocast entered
        assert not torch.is_autocast_enabled("cpu") and not torch.is_autocast_enabled("cuda")


def test_cuda_grants_what_the_card_can_do():
    chosen = choose_precision(CUDA, "bf16", "fp16", bf16_supported=lambda _d: True)
    assert (chosen.decode, chosen.vocoder, chosen.notes) == (torch.bfloat16, torch.float16, ())
    assert chosen.describe() == "decode bfloat16 (CUDA graphs), vocoder float16"  # graphs: auto
    old_card = choose_precision(CUDA, "bf16", "bf16", bf16_supported=lambda _d: False)  # a T4: no native bf16
    assert old_card.decode is None and old_card.vocoder is None
    assert all("no native bf16" in note for note in old_card.notes) and len(old_card.notes) == 2
    assert choose_precision(CUDA, "fp32", "fp16", bf16_supported=lambda _d: False).vocoder == torch.float16


def test_decode_graphs_are_granted_on_cuda_only_and_reach_the_decode_loop():
    from xtts_ft.serve.decode_loop import DecodeLoop

    on_card = choose_precision(CUDA, "fp32", "fp32", "on")
    assert on_card.graphs and on_card.notes == () and on_card.describe() == "decode fp32 (CUDA graphs), vocoder fp32"
    on_cpu = choose_precision(torch.device("cpu"), "fp32", "fp32", "on")
    assert not on_cpu.graphs and on_cpu.notes == ("decode graphs are for CUDA; on cpu the decode step runs eagerly",)
    by_default = choose_precision(CUDA, "fp32", "fp32", ServeConfig.decode_graphs)  # auto: on on a card
    assert ServeConfig.decode_graphs == "auto" and by_default.graphs and by_default.notes == ()
    cpu_default = choose_precision(torch.device("cpu"), "fp32", "fp32", ServeConfig.decode_graphs)
    assert not cpu_default.graphs and cpu_default.notes == ()  # auto on a CPU: eager, nothing to say
    assert not choose_precision(CUDA, "fp32", "fp32", "off").graphs
    with pytest.raises(ConfigError, match="--decode-graphs yes: choose one of auto, off, on"):
        choose_precision(CUDA, "fp32", "fp32", "yes")

    class _GPT(torch.nn.Module):  # what the decoder's constructor checks of a GPT
        def __init__(self):
            super().__init__()
            import functools

            from transformers import GPT2Config
            self.gpt = torch.nn.Module()
            self.gpt.wpe = functools.partial(torch.zeros)
            self.gpt.config = GPT2Config(n_layer=1, n_embd=8, n_head=2)
            self.gpt.config._attn_implementation = "sdpa"
            self.gpt.h = []

    assert DecodeLoop(_GPT(), 2, on_card).fixed_step is not None
    assert DecodeLoop(_GPT(), 2, on_cpu).fixed_step is None


@pytest.mark.parametrize(("decode", "vocoder", "words"), [
    ("fp16", "fp32", "--decode-precision fp16: choose one of fp32, bf16"),
    ("fp32", "fp8", "--vocoder-precision fp8: choose one of fp32, fp16, bf16"),
])
def test_a_value_outside_the_schema_is_one_line(decode, vocoder, words):
    with pytest.raises(ConfigError, match=words):
        choose_precision(CUDA, decode, vocoder)


def test_overlapped_decode_steps_are_for_a_card_with_decode_overlap_auto(monkeypatch):
    """``ServeConfig.decode_overlap`` auto: the engine's decode loop overlaps its steps on CUDA only; off: never."""
    from xtts_ft.serve import engine as engine_module

    made = []

    class Loop:
        def __init__(self, gpt, max_active, precision, overlap):
            made.append(overlap)

    monkeypatch.setattr(engine_module, "DecodeLoop", Loop)
    for device, setting, expected in (("cuda", "auto", True), ("cuda", "off", False), ("cpu", "auto", False)):
        engine_module.new_decode_loop(None, torch.device(device), ServeConfig(decode_overlap=setting), EnginePrecision())
        assert made[-1] is expected, (device, setting)
