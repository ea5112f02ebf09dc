"""The decode step's head replayed from a CUDA graph: from the blocks' hidden states to each row's distribution.

After the GPT-2 blocks (:mod:`.decode_graph` replays them as one graph) a decode step turns each row's hidden
state into its code: the final norm (the latent HiFiGAN gets), the output head, the finiteness check, the
repetition penalty, temperature, top-k, top-p and the softmax (:meth:`.batch_decode.Sampling.distribution`).
That is about forty small operations whatever the batch, each a kernel launch of a few to tens of
microseconds of host time on a GPU, while their arithmetic is a few microseconds in all; on an H200 a caller
alone took 4.1 ms a step with the blocks replayed from a graph (docs/gpu_benchmarks.md). What is left outside
is the draw itself (one noise draw per row with the row's own generator, :func:`.batch_decode.draw`: a graph
would fix which generators it draws from) and the step's one read of the codes.

:class:`FixedShapeHead` records the head for the batch's rows rounded up to a power of two and one sampling
setting, the first time a step needs that shape, and replays it after; each recording is checked against the
eager head (:func:`head`) as the step's graphs are, and one that fails or differs turns the head graphs off,
once, with the reason. A batch whose rows do not all share one setting runs the eager head (one server uses one
setting). Rows past the batch keep old inputs: finite, and nobody reads their outputs.

On the CPU there are no launches to save; the CPU tests run it with a recorder that records nothing
(:func:`.decode_graph.call_directly`), and the engine uses it wherever the step's graphs run.
"""

from __future__ import annotations

import logging
from typing import Callable, Optional, Protocol

import torch

from xtts_ft.inference.decode_graph import Recorder, Recordings, full_fp32_matmuls, relative_difference
from xtts_ft.inference.prefill_graph import shared_pool_graphs

log = logging.getLogger(__name__)

# What the head gives: each row's latent (rows, dim, fp32), its distribution (rows, vocab: probabilities when
# sampling, the penalised scores when greedy) and whether all its logits were finite (rows,).
Head = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


class SamplingSetting(Protocol):
    """What the head needs of a sampling setting (:class:`.batch_decode.Sampling`, which imports this module): its
    distribution over the codes. A setting is hashable: the head keeps one recording per setting."""

    def distribution(self, scores: torch.Tensor, seen: torch.Tensor) -> torch.Tensor: ...


# What tells the head's recordings apart: the rows rounded up to a power of two, the sampling setting, the hidden
# states' dtype and device, and the autocast state.
HeadKey = tuple[int, SamplingSetting, torch.dtype, torch.device, bool, torch.dtype]


def latents_and_logits(gpt: torch.nn.Module, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``hidden`` (rows, dim) through the final norm and the output head in their own dtype (fp32: the latents
    HiFiGAN gets, the logits sampled)."""
    final_norm = gpt.final_norm
    latents = final_norm(hidden.to(final_norm.weight.dtype))
    return latents, gpt.mel_head(latents)


def head(gpt: torch.nn.Module, hidden: torch.Tensor, seen: torch.Tensor, sampling: SamplingSetting) -> Head:
    """The eager head: :func:`latents_and_logits`, then ``sampling``'s distribution (``seen``: (rows, vocab), the ids
    already in each row's input) and the finite flags."""
    latents, logits = latents_and_logits(gpt, hidden)
    return latents, sampling.distribution(logits, seen), torch.isfinite(logits).all(dim=-1)


class FixedShapeHead(Recordings[HeadKey, tuple[Callable[[], Head], torch.Tensor, torch.Tensor]]):
    """The head through recorded fixed-shape graphs: one per (rows rounded up to a power of two, sampling setting,
    dtype), replayed whenever a step has that shape again."""

    what = "decode head"
    instead = "the eager head"
    _log = log

    def __init__(self, record: Optional[Recorder] = None, tolerance: Optional[float] = None) -> None:
        """``record``: None, CUDA graphs that share one memory pool (made at the first recording): a head's outputs
        are read before the next step, so the shapes need not each keep their own working memory."""
        super().__init__(tolerance)
        self.record = record
        # per key: the replay, and the inputs it reads (hidden states, seen ids) for the fixed rows
        self._recorded: dict[HeadKey, tuple[Callable[[], Head], torch.Tensor, torch.Tensor]] = {}

    def run(self, gpt: torch.nn.Module, hidden: torch.Tensor, seen: torch.Tensor, sampling: SamplingSetting) -> Head:
        """:func:`head` of the batch's ``hidden`` (n, dim) and ``seen`` (n, vocab). The latents are the caller's to
        keep; the distribution and the finite flags are the graph's outputs, read before the next step."""
        if self.disabled is not None:
            return head(gpt, hidden, seen, sampling)
        n = hidden.shape[0]
        key = (1 << max(n - 1, 0).bit_length(), sampling, hidden.dtype, hidden.device,
               torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda"))
        recorded = self._recorded.get(key)
        if recorded is None:
            with full_fp32_matmuls():  # the eager head, the recording and their comparison: whatever TF32 says
                return self._first(gpt, hidden, seen, sampling, key)
        replay, hidden_in, seen_in = recorded
        hidden_in[:n].copy_(hidden)
        seen_in[:n].copy_(seen)
        latents, distribution, finite = replay()
        self.replays += 1
        return latents[:n].clone(), distribution[:n], finite[:n]  # the requests keep their latents past this step

    def _first(self, gpt: torch.nn.Module, hidden: torch.Tensor, seen: torch.Tensor, sampling: SamplingSetting,
               key: HeadKey) -> Head:
        """A new shape: the eager head gives this step's result; the new recording must give the same."""
        expected = head(gpt, hidden, seen, sampling)
        n, rows = hidden.shape[0], key[0]
        hidden_in = torch.zeros(rows, hidden.shape[1], dtype=hidden.dtype, device=hidden.device)
        seen_in = torch.zeros(rows, seen.shape[1], dtype=seen.dtype, device=seen.device)
        hidden_in[:n] = hidden
        seen_in[:n] = seen
        if self.record is None:
            self.record = shared_pool_graphs()
        try:
            replay = self.record(lambda: head(gpt, hidden_in, seen_in, sampling))
            got = replay()
        except RuntimeError as exc:  # recording refused (an operation a graph cannot hold, out of memory)
            self._disable(f"recording the decode head failed: {exc}".splitlines()[0])
            return expected
        error = max(_relative(got[0][:n], expected[0]), _relative(got[1][:n], expected[1]))
        if not (error <= self._tolerance(torch.float32) and torch.equal(got[2][:n], expected[2])):
            self._disable(f"the recorded decode head differs from the eager one by {error:.2e} (relative)")
            return expected
        self.recordings += 1
        self._recorded[key] = (replay, hidden_in, seen_in)
        return expected


def _relative(got: torch.Tensor, expected: torch.Tensor) -> float:
    """The largest |got - expected| relative to the largest |expected|, over the entries finite in both (infinite
    where the other is not: no match). A row whose logits are not finite is refused by the step either way."""
    finite = torch.isfinite(expected)
    if not torch.equal(finite, torch.isfinite(got)):
        return float("inf")
    if not bool(finite.any()):
        return 0.0
    return relative_difference(got[finite], expected[finite])
