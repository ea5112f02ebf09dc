"""Half precision for the engine: granted on CUDA only, bf16 only with native support, fp32 by default."""

from __future__ import annotations

import pytest
import torch

from xtts_ft.config import ServeConfig
from xtts_ft.errors import ConfigError
from xtts_ft.serve.precision import EnginePrecision, choose_precision

CUDA = torch.device("cuda", 0)  # a device object only: nothing runs on it


def test_the_defaults_are_fp32_everywhere():
    for device in (torch.device("cpu"), CUDA):
        chosen = choose_precision(device, ServeConfig.decode_precision, ServeConfig.vocoder_precision,
                                  bf16_supported=lambda _d: True)
        assert chosen == EnginePrecision() and chosen.describe() == "decode fp32, vocoder fp32"


def test_the_cpu_never_runs_in_half_precision_and_says_so():
    chosen = choose_precision(torch.device("cpu"), "bf16", "fp16", bf16_supported=lambda _d: True)
    assert chosen.decode is None and chosen.vocoder is None
    assert chosen.notes == ("decode precision bf16 is for CUDA; on cpu the decode runs in fp32",
                            "vocoder precision fp16 is for CUDA; on cpu the vocoder runs in fp32")
    with chosen.decoding(), chosen.vocoding():  # no autocast entered
        assert not torch.is_autocast_enabled("cpu") and not torch.is_autocast_enabled("cuda")


def test_cuda_grants_what_the_card_can_do():
    chosen = choose_precision(CUDA, "bf16", "fp16", bf16_supported=lambda _d: True)
    assert (chosen.decode, chosen.vocoder, chosen.notes) == (torch.bfloat16, torch.float16, ())
    assert chosen.describe() == "decode bfloat16, vocoder float16"
    old_card = choose_precision(CUDA, "bf16", "bf16", bf16_supported=lambda _d: False)  # a T4: no native bf16
    assert old_card.decode is None and old_card.vocoder is None
    assert all("no native bf16" in note for note in old_card.notes) and len(old_card.notes) == 2
    assert choose_precision(CUDA, "fp32", "fp16", bf16_supported=lambda _d: False).vocoder == torch.float16


@pytest.mark.parametrize(("decode", "vocoder", "words"), [
    ("fp16", "fp32", "--decode-precision fp16: choose one of fp32, bf16"),
    ("fp32", "fp8", "--vocoder-precision fp8: choose one of fp32, fp16, bf16"),
])
def test_a_value_outside_the_schema_is_one_line(decode, vocoder, words):
    with pytest.raises(ConfigError, match=words):
        choose_precision(CUDA, decode, vocoder)
