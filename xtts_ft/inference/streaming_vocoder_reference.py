"""The streaming vocoder's frames as they were first computed, kept as the oracle and the baseline of the faster way.

:meth:`xtts_ft.inference.streaming_vocoder.StreamingVocoder._frames` computes the same upsampled frames from index
tables built on the host (NumPy), over the latents of the window only. This first version stacked every latent
of the utterance at every chunk (work that grows with the utterance, not the chunk), worked out the indices with
about twenty small tensor operations on the latents' device, and called ``torch.unique`` there (on a GPU a wait
for the stream, at every chunk). tests/inference/test_streaming_vocoder.py checks that both give the same frames bit for
bit; ``benchmarks/streaming_plan.py`` times both in one run. Nothing in the product uses this module.
"""

from __future__ import annotations

import math

import torch

from xtts_ft.inference.streaming_vocoder import StreamingVocoder


class ReferenceStreamingVocoder(StreamingVocoder):
    """A :class:`StreamingVocoder` whose frames come from the first version's computation."""

    def _frames(self, start: int, stop: int, total: int) -> torch.Tensor:
        latents = torch.stack(self._latents)  # (L, C): every latent so far
        n1 = int(math.floor(len(self._latents) * self.r1))
        idx2 = torch.arange(start, stop, dtype=torch.float64, device=latents.device)
        j0, j1, w2 = _source(idx2, self.r2, n1)
        needed = torch.unique(torch.cat([j0, j1]))
        a0, a1, w1 = _source(needed.to(torch.float64), self.r1, len(self._latents))
        z1 = latents[a0] + (latents[a1] - latents[a0]) * w1.to(latents.dtype)[:, None]
        pos = torch.searchsorted(needed, torch.stack([j0, j1]))
        w = w2.to(latents.dtype)[:, None]
        z2 = z1[pos[0]] + (z1[pos[1]] - z1[pos[0]]) * w
        return z2.T


def _source(dst: torch.Tensor, scale: float, size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    src = ((dst + 0.5) / scale - 0.5).clamp(min=0.0)
    i0 = src.floor().long().clamp(max=size - 1)
    i1 = torch.where(i0 < size - 1, i0 + 1, i0)
    return i0, i1, src - i0.to(src.dtype)
