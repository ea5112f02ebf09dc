"""How a decoder runs (:func:`xtts_ft.inference.decoder_settings.decoder_settings`): half precision, graphs, overlap
and the vocoder stream granted on CUDA only, bf16 only with native support; fp32 by default."""

from __future__ import annotations

import pytest
import torch

from xtts_ft.config import ServeConfig
from xtts_ft.errors import ConfigError
from xtts_ft.inference.decoder_settings import DecoderSettings, decoder_settings

CUDA = torch.device("cuda", 0)  # a device object only: nothing runs on it


def _serve(decode: str, vocoder: str, graphs: str = ServeConfig.decode_graphs) -> ServeConfig:
    """The serve settings with these precisions and graphs (a ServeConfig checks nothing when built here)."""
    return ServeConfig(decode_precision=decode, vocoder_precision=vocoder, decode_graphs=graphs)  # type: ignore[arg-type]


def test_the_defaults_are_fp32_everywhere_with_graphs_on_cuda():
    """What the H200 measurements chose: fp32 decode and vocoder (bf16 paid only at many rows, fp16 HiFiGAN was
    slower), the decode step from CUDA graphs on a card."""
    for device in (torch.device("cpu"), CUDA):
        chosen = decoder_settings(device, ServeConfig(), bf16_supported=lambda _d: True)
        on_card = device.type == "cuda"
        assert chosen == DecoderSettings(graphs=on_card, overlap=on_card, vocoder_stream=on_card,
                                         vocoder_batch=ServeConfig.vocoder_batch if on_card else 1)
        assert chosen.describe() == f"decode fp32{' (CUDA graphs)' if on_card else ''}, vocoder fp32"


def test_the_cpu_never_runs_in_half_precision_and_says_so():
    chosen = decoder_settings(torch.device("cpu"), _serve("bf16", "fp16"), bf16_supported=lambda _d: True)
    assert chosen.decode is None and chosen.vocoder is None
    assert chosen.notes == ("decode precision bf16 is for CUDA; on cpu the decode runs in fp32",
                            "vocoder precision fp16 is for CUDA; on cpu the vocoder runs in fp32")
    with chosen.vocoding():  # no autocast entered
        assert not torch.is_autocast_enabled("cpu") and not torch.is_autocast_enabled("cuda")


def test_cuda_grants_what_the_card_can_do():
    chosen = decoder_settings(CUDA, _serve("bf16", "fp16"), bf16_supported=lambda _d: True)
    assert (chosen.decode, chosen.vocoder, chosen.notes) == (torch.bfloat16, torch.float16, ())
    assert chosen.describe() == "decode bfloat16 (CUDA graphs), vocoder float16"  # graphs: auto
    old_card = decoder_settings(CUDA, _serve("bf16", "bf16"), bf16_supported=lambda _d: False)  # a T4: no native bf16
    assert old_card.decode is None and old_card.vocoder is None
    assert all("no native bf16" in note for note in old_card.notes) and len(old_card.notes) == 2
    assert decoder_settings(CUDA, _serve("fp32", "fp16"), bf16_supported=lambda _d: False).vocoder == torch.float16


def test_decode_graphs_are_granted_on_cuda_only_and_reach_the_decode_loop():
    from xtts_ft.serve.decode_loop import DecodeLoop

    on_card = decoder_settings(CUDA, _serve("fp32", "fp32", "on"))
    assert on_card.graphs and on_card.notes == () and on_card.describe() == "decode fp32 (CUDA graphs), vocoder fp32"
    on_cpu = decoder_settings(torch.device("cpu"), _serve("fp32", "fp32", "on"))
    assert not on_cpu.graphs and on_cpu.notes == ("decode graphs are for CUDA; on cpu the decode step runs eagerly",)
    by_default = decoder_settings(CUDA, _serve("fp32", "fp32", ServeConfig.decode_graphs))  # auto: on on a card
    assert ServeConfig.decode_graphs == "auto" and by_default.graphs and by_default.notes == ()
    cpu_default = decoder_settings(torch.device("cpu"), _serve("fp32", "fp32", ServeConfig.decode_graphs))
    assert not cpu_default.graphs and cpu_default.notes == ()  # auto on a CPU: eager, nothing to say
    assert not decoder_settings(CUDA, _serve("fp32", "fp32", "off")).graphs
    with pytest.raises(ConfigError, match="--decode-graphs yes: choose one of auto, off, on"):
        decoder_settings(CUDA, _serve("fp32", "fp32", "yes"))

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
        decoder_settings(CUDA, _serve(decode, vocoder))


def test_overlap_vocoder_stream_and_vocoder_batch_are_for_a_card_with_their_settings_auto():
    """``ServeConfig.decode_overlap`` / ``vocoder_stream`` auto: on CUDA only; off: never. ``vocoder_batch``: on CUDA
    only (the CPU vocodes one window per call). Evaluation (no serve settings) gets none of them, on any device."""
    for device, setting, expected in (("cuda", "auto", True), ("cuda", "off", False), ("cpu", "auto", False)):
        chosen = decoder_settings(torch.device(device), ServeConfig(decode_overlap=setting, vocoder_stream=setting,
                                                                    vocoder_batch=6))
        assert (chosen.overlap, chosen.vocoder_stream) == (expected, expected), (device, setting)
        assert chosen.vocoder_batch == (6 if device == "cuda" else 1)
    assert decoder_settings(CUDA) == decoder_settings(torch.device("cpu")) == DecoderSettings()
    assert not DecoderSettings().overlap and not DecoderSettings().graphs
