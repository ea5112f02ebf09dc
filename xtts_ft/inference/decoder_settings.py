"""How a decoder runs, decided in one place: :func:`decoder_settings` (device + settings -> :class:`DecoderSettings`).

Evaluation and the speech server both build their decoder through it: evaluation passes no serve settings and gets
coqui's way (fp32, eager steps, one step at a time; its codes equal ``Xtts.inference``'s for the same seed), the
server passes its ``ServeConfig``. :meth:`DecoderSettings.decoder` then builds the
:class:`~xtts_ft.inference.batch_decode.BatchDecoder` with the parts those settings name (its
:class:`~xtts_ft.inference.batch_decode.DecoderParts`).

- decode bf16 (``ServeConfig.decode_precision``): the decoder runs a copy of the GPT-2 blocks with its weights cast
  to bf16 once (:func:`xtts_ft.inference.batch_decode.decode_transformer`); the embeddings, coqui's final norm and
  the output head stay fp32, so the latents HiFiGAN gets and the logits that are sampled are fp32. The first
  version ran the steps under ``torch.autocast``, which casts every weight at every step: on an H200 that
  made a step 3-4x slower than fp32 without CUDA graphs, and paid only with graphs at many rows
  (docs/gpu_benchmarks.md; the weights cast once are not measured on a card yet).
- vocoder fp16/bf16 (``vocoder_precision``): each HiFiGAN call under ``torch.autocast`` with that dtype, the audio
  handed on as fp32. On an H200 fp16 was slower than fp32 and bf16 saved 15 %.
- graphs (``decode_graphs``): the decode step, its head and the prefill replayed from CUDA graphs
  (:mod:`.decode_graph`, :mod:`.head_graph`, :mod:`.prefill_graph`), the recorded blocks' GELU as one kernel;
  ``auto`` (the default) is on on CUDA and off elsewhere without a note, ``on`` on a CPU says it was not granted.
- overlap (``decode_overlap``): each step launched before the one before it is read back (:mod:`.step_in_flight`);
  on CUDA only (on the CPU nothing runs ahead, and a finished row's extra step would be work for nothing).
- vocoder stream (``vocoder_stream``) and vocoder batch (``vocoder_batch``): on CUDA the streamed chunks are
  vocoded on a CUDA stream of their own, and one vocoder call takes up to that many callers' waiting windows; on
  the CPU one stream and one window per call.

Half precision is off by default and off on the CPU whatever is asked: a CPU has no fast half-precision path for
these shapes, and the decoder's exactness guarantees (its codes equal coqui's; a row's codes do not depend on who
else is in the batch) are tested in fp32. bf16 needs native support (compute capability 8.0 or newer,
:func:`xtts_ft.train.precision.cuda_bf16_supported`); without it the decoder stays in fp32 and says so.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Callable, ContextManager, Optional

import torch

from xtts_ft.config import ServeConfig, field_choices
from xtts_ft.errors import ConfigError
from xtts_ft.inference.batch_decode import BatchDecoder, DecoderParts, decode_transformer, prefill_forward
from xtts_ft.inference.decode_graph import FixedShapeStep, Recorder, cuda_graph
from xtts_ft.inference.head_graph import FixedShapeHead
from xtts_ft.inference.prefill_graph import FixedShapePrefill
from xtts_ft.train.precision import cuda_bf16_supported

DECODE_CHOICES = field_choices(ServeConfig, "decode_precision")
VOCODER_CHOICES = field_choices(ServeConfig, "vocoder_precision")
GRAPH_CHOICES = field_choices(ServeConfig, "decode_graphs")
_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


@dataclass(frozen=True)
class DecoderSettings:
    """How a decoder runs: the dtypes of its GPT-2 blocks' weights and of the vocoder's autocast (None: fp32), whether
    its step, head and prefill are replayed from CUDA graphs, whether each step is launched before the one before it
    is read back, whether streamed chunks are vocoded on a CUDA stream of their own and how many windows one vocoder
    call takes, and why any request was not granted. The default is evaluation's: coqui's way on any device.

    ``record``: what records the graphs' steps; None, CUDA graphs (each graph part's own way). A CPU test passes a
    stand-in (:func:`xtts_ft.inference.decode_graph.call_directly`: every shape, address and check the same, the
    step run at each replay) to run the graphs' code without a GPU; :func:`decoder_settings` never sets it."""

    decode: Optional[torch.dtype] = None
    vocoder: Optional[torch.dtype] = None
    notes: tuple[str, ...] = field(default=())
    graphs: bool = False
    overlap: bool = False
    vocoder_stream: bool = False
    vocoder_batch: int = 1
    record: Optional[Recorder] = None

    def vocoding(self) -> ContextManager[object]:
        """Around one HiFiGAN call."""
        if self.vocoder is None:
            return contextlib.nullcontext()
        autocast: ContextManager[object] = torch.autocast(device_type="cuda", dtype=self.vocoder)
        return autocast

    def describe(self) -> str:
        def name(dtype: Optional[torch.dtype]) -> str:
            return "fp32" if dtype is None else str(dtype).replace("torch.", "")

        return f"decode {name(self.decode)}{' (CUDA graphs)' if self.graphs else ''}, vocoder {name(self.vocoder)}"

    def transformer(self, gpt: torch.nn.Module) -> torch.nn.Module:
        """The GPT-2 blocks the decoder runs: ``gpt.gpt`` itself in fp32, else a copy in the decode dtype (made once;
        a decode loop keeps it for every decoder it builds)."""
        return decode_transformer(gpt, self.decode)

    def decoder(self, gpt: torch.nn.Module, max_rows: Optional[int] = None,
                transformer: Optional[torch.nn.Module] = None) -> BatchDecoder:
        """A :class:`BatchDecoder` of ``gpt`` running these settings (``max_rows``: the most rows it will hold, the
        fixed-shape cache's size with graphs; ``transformer``: the blocks from :meth:`transformer`, made here if
        not given)."""
        blocks = self.transformer(gpt) if transformer is None else transformer
        if not self.graphs:
            return BatchDecoder(gpt, DecoderParts(transformer=blocks, overlap=self.overlap))
        # the step, its head and the prefill replayed from CUDA graphs (recorded in the thread that decodes), the
        # recorded blocks with their GELU as one kernel (decode_cache.mlp)
        step = FixedShapeStep(cuda_graph if self.record is None else self.record, fused_gelu=True)
        return BatchDecoder(gpt, DecoderParts(transformer=blocks, step=step, max_rows=max_rows,
                                              prefill=FixedShapePrefill(prefill_forward, self.record, fused_gelu=True),
                                              head=FixedShapeHead(self.record), overlap=self.overlap))


def decoder_settings(device: torch.device, serve: Optional[ServeConfig] = None, *,
                     bf16_supported: Callable[[torch.device], bool] = cuda_bf16_supported) -> DecoderSettings:
    """How a decoder on ``device`` runs. ``serve``: the speech server's settings (``ServeConfig``), each granted only
    where it is for (a bad value is a ConfigError); None: evaluation's decoder, coqui's way (the default settings)."""
    if serve is None:
        return DecoderSettings()
    decode, vocoder, graphs = serve.decode_precision, serve.vocoder_precision, serve.decode_graphs
    for key, value, choices in (("decode_precision", decode, DECODE_CHOICES),
                                ("vocoder_precision", vocoder, VOCODER_CHOICES), ("decode_graphs", graphs, GRAPH_CHOICES)):
        if value not in choices:
            flag = "--" + key.replace("_", "-")
            raise ConfigError(f"{flag} {value}: choose one of {', '.join(choices)}")
    cuda = device.type == "cuda"
    notes: list[str] = []
    granted: dict[str, Optional[torch.dtype]] = {}
    for key, value in (("decode", decode), ("vocoder", vocoder)):
        if value == "fp32":
            granted[key] = None
        elif not cuda:
            notes.append(f"{key} precision {value} is for CUDA; on {device.type} the {key} runs in fp32")
            granted[key] = None
        elif value == "bf16" and not bf16_supported(device):
            notes.append(f"{key} precision bf16: this GPU has no native bf16 (compute capability below 8.0); fp32")
            granted[key] = None
        else:
            granted[key] = _DTYPES[value]
    if graphs == "on" and not cuda:
        notes.append(f"decode graphs are for CUDA; on {device.type} the decode step runs eagerly")
    return DecoderSettings(granted["decode"], granted["vocoder"], tuple(notes), graphs=graphs != "off" and cuda,
                           overlap=cuda and serve.decode_overlap == "auto",
                           vocoder_stream=cuda and serve.vocoder_stream == "auto",
                           vocoder_batch=serve.vocoder_batch if cuda else 1)
