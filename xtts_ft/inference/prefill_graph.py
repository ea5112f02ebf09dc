"""The prefill replayed from CUDA graphs: a request's prefix through the 30 layers in one launch.

A request joins the batch after its *prefill*: its conditioning latents, text and start code in one forward
pass that fills its keys and values (:func:`.batch_decode.prefill`, Hugging Face's ``GPT2Model``, as coqui's
first generation step). For the few dozen positions of one sentence that is little arithmetic, and on a GPU
its time is the host launching the forward's kernels one after another: on an H200 a request alone took
about 19 ms (docs/gpu_benchmarks.md) for what its arithmetic needs in about 1 ms. A caller alone waits for
it before the first code; with many callers it is paid once per request, by every other row too (the loop
does not step while it prefills): with 40-code requests at 32 callers, about as much GPU time per request as
its share of the 40 decode steps.

:class:`FixedShapePrefill` runs the same forward from recorded CUDA graphs. A graph needs fixed shapes, so
the rows are padded up to a power of two and the positions up to a multiple of ``LENGTH_BUCKET``, on the
right: with causal attention a real position never sees a padded one after it, so each row's real
positions get their own numbers (up to the rounding of another kernel over another shape). Each (rows,
positions) bucket is recorded the first time a join needs it, its working memory in one pool shared by all of
them and its inputs and outputs in one set of buffers shared by all of them (``POSITIONS`` rows x positions;
a larger group is prefilled eagerly), and checked against the eager prefill before it is used, as the decode
step's graphs are
(:mod:`.decode_graph`): a recording that fails or differs turns the prefill graphs off, once, with the
reason, and the eager result is what that join uses either way.

On the CPU there are no launches to save and the engine's exactness guarantees are tested against the eager
prefill, so this runs only where the decode step's graphs run (``ServeConfig.decode_graphs``); the CPU tests
run it with a recorder that records nothing (:func:`.decode_graph.call_directly`).
"""

from __future__ import annotations

import logging
from typing import Callable, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from xtts_ft.inference.decode_cache import indices, mlp
from xtts_ft.inference.decode_graph import Out, Recorder, Recordings, cuda_graph, full_fp32_matmuls, relative_difference

log = logging.getLogger(__name__)

LENGTH_BUCKET = 32  # positions of a recorded prefill: a multiple of this (a sentence's prefix is about 50-120)
# Most rows x positions a recorded prefill covers: its inputs and outputs live in buffers of this size that all the
# buckets share (keys and values of every layer: for XTTS-v2 in fp32 about 0.25 MB per position, 315 MB in all).
# A group of joins past it (8 rows of more than 160 positions, 4 of more than 320) is prefilled eagerly; one
# request of any length the GPT accepts fits.
POSITIONS = 1280

Blocks = tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]  # what :func:`causal_blocks` gives
# What a prefill gives :class:`.batch_decode.BatchDecoder`: each row's last hidden state (rows, dim), each layer's
# keys and values (rows, heads, positions, head_dim; a row's are its first ``length`` positions), the lengths.
Prefilled = tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor], list[int]]


def causal_blocks(transformer: nn.Module, embeddings: torch.Tensor, fused_gelu: bool = False) -> Blocks:
    """``GPT2Model``'s forward over right-padded rows (rows, positions, dim) with plain causal attention and no
    cache object: the final-normed hidden states and each layer's keys and values. The blocks' own modules, in
    Hugging Face's order (coqui's GPT-2 adds no position inside the blocks: its ``wpe`` gives zeros).
    ``fused_gelu``: :func:`.decode_cache.mlp`'s."""
    x = embeddings
    keys: list[torch.Tensor] = []
    values: list[torch.Tensor] = []
    for block in transformer.h:
        attn = block.attn
        q, k, v = attn.c_attn(block.ln_1(x)).split(attn.split_size, dim=2)
        shape = (*x.shape[:-1], -1, attn.head_dim)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, dropout_p=0.0, scale=attn.scaling, is_causal=True)
        a = a.transpose(1, 2).contiguous()
        x = attn.c_proj(a.reshape(*a.shape[:-2], -1).contiguous()) + x
        x = x + mlp(block, block.ln_2(x), fused_gelu)
        keys.append(k)
        values.append(v)
    return transformer.ln_f(x), keys, values


def gathered(out: Blocks, lengths: list[int]) -> Prefilled:
    """:func:`causal_blocks`'s output as a prefill gives it: each row's hidden state at its last real position, and
    every layer's keys and values for the real rows (views: a row's real ones are its first ``length`` positions)."""
    hidden, keys, values = out
    n = len(lengths)
    last = indices([length - 1 for length in lengths], hidden.device)
    return hidden[torch.arange(n, device=hidden.device), last], [k[:n] for k in keys], [v[:n] for v in values], lengths


def padded_prefill(transformer: nn.Module, rows: list[torch.Tensor]) -> Prefilled:
    """The prefill of ``rows`` through :func:`causal_blocks`, right-padded to the longest: for blocks in half
    precision, which Hugging Face's ``GPT2Model`` cannot run (it adds coqui's position embeddings, fp32 zeros,
    and the sum is fp32 again)."""
    return gathered(causal_blocks(transformer, right_padded(rows)), [row.shape[1] for row in rows])


def right_padded(rows: list[torch.Tensor]) -> torch.Tensor:
    """``rows`` (each (1, length, dim)) as one batch (n, longest, dim), each padded with zeros on the right."""
    longest = max(row.shape[1] for row in rows)
    return torch.cat([F.pad(row, (0, 0, 0, longest - row.shape[1])) for row in rows])


def shared_pool_graphs() -> Recorder:
    """A recorder of CUDA graphs that all draw on one memory pool (created here): a prefill's outputs are read
    before the next prefill replays, so the buckets need not each keep their own activations (the decode step's
    head, :mod:`.head_graph`, records its shapes the same way)."""
    pool = torch.cuda.graph_pool_handle()

    def record(step: Callable[[], Out]) -> Callable[[], Out]:
        return cuda_graph(step, pool=pool)

    return record


class _Buffers:
    """The inputs and outputs every recorded prefill uses, allocated once (outside any recording) for ``positions``
    rows x positions: each bucket reads and writes views of their first elements, so a new bucket adds no memory
    but its own graph (a recording that kept its outputs would keep every layer's keys and values per bucket)."""

    def __init__(self, transformer: nn.Module, positions: int, dtypes: tuple[torch.dtype, torch.dtype, torch.dtype],
                 device: torch.device) -> None:
        """``dtypes``: of the inputs, the hidden states and the keys and values (under autocast they differ)."""
        self.width = int(transformer.config.n_embd)
        self.heads = int(transformer.config.n_head)
        size = positions * self.width
        inputs, hidden, cached = dtypes
        self.inputs = torch.zeros(size, dtype=inputs, device=device)
        self.hidden = torch.zeros(size, dtype=hidden, device=device)
        self.keys = [torch.zeros(size, dtype=cached, device=device) for _ in transformer.h]
        self.values = [torch.zeros(size, dtype=cached, device=device) for _ in transformer.h]

    def inputs_view(self, rows: int, positions: int) -> torch.Tensor:
        """(rows, positions, width): what a bucket's recording reads."""
        return self.inputs[:rows * positions * self.width].view(rows, positions, self.width)

    def outputs_view(self, rows: int, positions: int) -> Blocks:
        """What a bucket's recording writes: hidden states (rows, positions, width) and each layer's keys and values
        (rows, heads, positions, head_dim)."""
        n = rows * positions * self.width
        shape = (rows, self.heads, positions, self.width // self.heads)
        return (self.hidden[:n].view(rows, positions, self.width), [k[:n].view(shape) for k in self.keys],
                [v[:n].view(shape) for v in self.values])


#: What tells the prefill's recordings apart: the (rows, positions) bucket, the inputs' dtype and the autocast state.
PrefillKey = tuple[tuple[int, int], torch.dtype, bool, torch.dtype]
#: What tells the shared buffers apart: the inputs', hidden states' and keys' dtypes, and the device.
BufferKey = tuple[torch.dtype, torch.dtype, torch.dtype, torch.device]


class FixedShapePrefill(Recordings[PrefillKey, tuple[Callable[[], Blocks], torch.Tensor]]):
    """Prefills through recorded fixed-shape forwards: one recording per (rows, positions) bucket, replayed
    whenever a join falls in it again. ``eager`` is the prefill it stands in for (and checks each recording
    against): :func:`.batch_decode.prefill`."""

    what = "prefill"
    instead = "the eager prefill"
    _log = log

    def __init__(self, eager: Callable[[nn.Module, list[torch.Tensor]], Prefilled],
                 record: Optional[Recorder] = None, tolerance: Optional[float] = None,
                 length_bucket: int = LENGTH_BUCKET, positions: int = POSITIONS, fused_gelu: bool = False) -> None:
        """``fused_gelu``: the recorded prefills run the blocks' GELU as one kernel (:func:`.decode_cache.mlp`; the
        eager prefill they are checked against keeps Hugging Face's): what serve records on a card."""
        super().__init__(tolerance)
        self.eager = eager
        self.fused_gelu = fused_gelu
        self._record = record  # None: CUDA graphs in one shared pool, made at the first recording
        self.length_bucket = int(length_bucket)
        self.positions = int(positions)  # most rows x positions recorded (the shared buffers' size)
        self._recorded: dict[PrefillKey, tuple[Callable[[], Blocks], torch.Tensor]] = {}  # bucket -> replay, its input view
        self._buffers: dict[BufferKey, _Buffers] = {}  # (the dtypes, device) -> the shared buffers

    def run(self, transformer: nn.Module, rows: list[torch.Tensor]) -> Prefilled:
        """The prefill of ``rows`` (each (1, length, dim): prefix and start code) through ``transformer`` (the
        GPT-2 blocks), as ``eager`` gives it."""
        if self.disabled is not None:
            return self.eager(transformer, rows)
        lengths = [row.shape[1] for row in rows]
        n = len(rows)
        shape = (1 << max(n - 1, 0).bit_length(), -(-max(lengths) // self.length_bucket) * self.length_bucket)
        if shape[1] > int(transformer.config.n_positions) or shape[0] * shape[1] > self.positions:
            # too long for the GPT (the eager forward says so), or a group past the shared buffers: eagerly
            return self.eager(transformer, rows)
        key = (shape, rows[0].dtype, torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda"))
        recorded = self._recorded.get(key)
        if recorded is None:
            with full_fp32_matmuls():  # the eager prefill, the recording and their comparison: whatever TF32 says
                return self._first(transformer, rows, key)
        replay, inputs = recorded
        for i, row in enumerate(rows):  # positions past a row's length keep old inputs: finite, attended by none
            inputs[i, :lengths[i]] = row[0]
        self.replays += 1
        return gathered(replay(), lengths)  # views of the graph's outputs: copied into the cache before the next replay

    def _first(self, transformer: nn.Module, rows: list[torch.Tensor], key: PrefillKey) -> Prefilled:
        """A new bucket: the eager prefill gives this join's result; the new recording must give the same."""
        expected = self.eager(transformer, rows)
        (n_rows, positions), lengths = key[0], expected[3]
        try:
            buffers = self._buffers_for(transformer, (rows[0].dtype, expected[0].dtype, expected[1][0].dtype),
                                        rows[0].device)
            inputs = buffers.inputs_view(n_rows, positions)
            for i, row in enumerate(rows):
                inputs[i, :lengths[i]] = row[0]
            outputs = buffers.outputs_view(n_rows, positions)

            def forward() -> Blocks:  # what is recorded: the blocks, their results written to the shared buffers
                hidden, keys, values = causal_blocks(transformer, inputs, self.fused_gelu)
                outputs[0].copy_(hidden)
                for out, got_ in zip(outputs[1] + outputs[2], keys + values):
                    out.copy_(got_)
                return outputs

            if self._record is None:
                self._record = shared_pool_graphs()
            replay = self._record(forward)
            got = gathered(replay(), lengths)
        except RuntimeError as exc:  # recording refused (an operation a graph cannot hold, out of memory)
            self._disable(f"recording the prefill failed: {exc}".splitlines()[0])
            return expected
        error = _largest_difference(got, expected)
        if not error <= self._tolerance(rows[0].dtype):
            self._disable(f"the recorded prefill differs from the eager one by {error:.2e} (relative)")
            return expected
        self.recordings += 1
        self._recorded[key] = (replay, inputs)
        return expected

    def _buffers_for(self, transformer: nn.Module, dtypes: tuple[torch.dtype, torch.dtype, torch.dtype],
                     device: torch.device) -> _Buffers:
        """The shared buffers for these dtypes (:class:`_Buffers`) on ``device``, made at their first use."""
        key: BufferKey = (*dtypes, device)
        if key not in self._buffers:
            self._buffers[key] = _Buffers(transformer, self.positions, dtypes, device)
        return self._buffers[key]


def _largest_difference(got: Prefilled, expected: Prefilled) -> float:
    """The largest |got - expected| over the hidden states and every row's real keys and values, relative to the
    largest |expected| of the same tensor."""
    worst = 0.0
    pairs = [(got[0], expected[0])]
    for i, length in enumerate(expected[3]):
        pairs += [(g[i, :, :length], e[i, :, :length]) for g, e in zip(got[1] + got[2], expected[1] + expected[2])]
    for g, e in pairs:
        worst = max(worst, relative_difference(g, e))
    return worst
