"""Half precision for the speech engine on CUDA: the GPT's decode in bf16, HiFiGAN in fp16 or bf16.

Both are off by default (``ServeConfig.decode_precision`` / ``vocoder_precision``: ``fp32``) and off on the
CPU whatever is asked: a CPU has no fast half-precision path for these shapes, and the engine's exactness
guarantees (its codes equal coqui's ``Xtts.inference``'s; a row's codes do not depend on who else is in
the batch) are tested in fp32.

- decode bf16: the decode loop runs a copy of the GPT-2 blocks with its weights cast to bf16 once
  (:func:`xtts_ft.inference.batch_decode.decode_transformer`); the embeddings, coqui's final norm and the
  output head stay fp32, so the latents HiFiGAN gets and the logits that are sampled are fp32. The first
  version ran the steps under ``torch.autocast``, which casts every weight at every step: on an H200 that
  made a step 3-4x slower than fp32 without CUDA graphs, and paid only with graphs at many rows
  (docs/gpu_benchmarks.md; the weights cast once are not measured on a card yet).
- vocoder fp16/bf16: each HiFiGAN call under ``torch.autocast`` with that dtype, the audio handed on as fp32.
  On an H200 fp16 was slower than fp32 and bf16 saved 15 %.

bf16 needs native support (compute capability 8.0 or newer, :func:`xtts_ft.train.precision.cuda_bf16_supported`);
without it the engine stays in fp32 and says so. Both defaults stay fp32.

The same choice decides whether the decode step and the prefill are replayed from CUDA graphs
(``ServeConfig.decode_graphs``, :mod:`xtts_ft.inference.decode_graph`, :mod:`xtts_ft.inference.prefill_graph`):
CUDA only; ``auto`` (the default) is on on CUDA and off elsewhere without a note, ``on`` on a CPU says it was
not granted.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Callable, ContextManager, Optional

import torch

from xtts_ft.config import ServeConfig, field_choices
from xtts_ft.errors import ConfigError
from xtts_ft.train.precision import cuda_bf16_supported

DECODE_CHOICES = field_choices(ServeConfig, "decode_precision")
VOCODER_CHOICES = field_choices(ServeConfig, "vocoder_precision")
GRAPH_CHOICES = field_choices(ServeConfig, "decode_graphs")
_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


@dataclass(frozen=True)
class EnginePrecision:
    """The dtypes the engine's decode (its GPT-2 blocks' weights) and vocoder (autocast) run in (None: fp32), whether
    the decode step and prefill are replayed from CUDA graphs, and why any request was not granted."""

    decode: Optional[torch.dtype] = None
    vocoder: Optional[torch.dtype] = None
    notes: tuple[str, ...] = field(default=())
    graphs: bool = False

    def vocoding(self) -> ContextManager[object]:
        """Around one HiFiGAN call."""
        return _autocast(self.vocoder)

    def describe(self) -> str:
        def name(dtype: Optional[torch.dtype]) -> str:
            return "fp32" if dtype is None else str(dtype).replace("torch.", "")

        return f"decode {name(self.decode)}{' (CUDA graphs)' if self.graphs else ''}, vocoder {name(self.vocoder)}"


def _autocast(dtype: Optional[torch.dtype]) -> ContextManager[object]:
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type="cuda", dtype=dtype)


def choose_precision(device: torch.device, decode: str, vocoder: str, graphs: str = "auto", *,
                     bf16_supported: Callable[[torch.device], bool] = cuda_bf16_supported) -> EnginePrecision:
    """What ``decode``/``vocoder``/``graphs`` (``ServeConfig`` values) give on ``device``; a bad value is a
    ConfigError."""
    for key, value, choices in (("decode_precision", decode, DECODE_CHOICES),
                                ("vocoder_precision", vocoder, VOCODER_CHOICES), ("decode_graphs", graphs, GRAPH_CHOICES)):
        if value not in choices:
            flag = "--" + key.replace("_", "-")
            raise ConfigError(f"{flag} {value}: choose one of {', '.join(choices)}")
    notes: list[str] = []
    granted: dict[str, Optional[torch.dtype]] = {}
    for key, value in (("decode", decode), ("vocoder", vocoder)):
        if value == "fp32":
            granted[key] = None
        elif device.type != "cuda":
            notes.append(f"{key} precision {value} is for CUDA; on {device.type} the {key} runs in fp32")
            granted[key] = None
        elif value == "bf16" and not bf16_supported(device):
            notes.append(f"{key} precision bf16: this GPU has no native bf16 (compute capability below 8.0); fp32")
            granted[key] = None
        else:
            granted[key] = _DTYPES[value]
    if graphs == "on" and device.type != "cuda":
        notes.append(f"decode graphs are for CUDA; on {device.type} the decode step runs eagerly")
    return EnginePrecision(granted["decode"], granted["vocoder"], tuple(notes),
                           graphs=graphs != "off" and device.type == "cuda")
