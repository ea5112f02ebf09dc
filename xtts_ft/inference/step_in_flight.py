"""A decode step launched and not yet read back: what lets the next step be launched before this one's codes are read.

Each decode step ends with one read of its codes from the device (the stop and length checks, and the readers'
views, are on the host). Without overlap the GPU then waits while the host takes the codes, wakes the readers
and launches the next step's operations one by one. With ``DecoderParts(overlap=True)`` the next step is launched
first, its input the codes still on the device, and the codes of the step before are read back after: on a card
the host's work of one step runs while the GPU computes the next. A row that finished (its stop code, its length)
is computed once more in the step already launched, and that code is dropped: each row's codes are the ones it
gets without overlap (tests/inference/test_step_overlap.py).

:class:`InFlight` holds such a step: its device tensors in the order the step computed its rows, and which of them
are still the batch's rows (rows that left since are no longer looked at). The codes' copy to the host is started
when the step is launched (on CUDA into pinned memory, without waiting) and waited for only when they are read.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Generic, Optional, TypeVar

import torch

from xtts_ft.inference.decode_cache import indices

Row = TypeVar("Row")  # what the decoder's rows are (its DecodeRequest)


@dataclass(frozen=True)
class InFlight(Generic[Row]):
    """One launched step: ``rows`` (the batch's rows it computed, in the batch's order), ``index`` (each row's place in
    the tensors), each row's code on the device, its latents, the codes' host copy (-1 where the logits were not
    finite), and the event after which that copy is complete (None: on the CPU, complete already)."""

    rows: list[Row]
    index: list[int]
    codes: torch.Tensor  # (computed rows,) long, on the device
    latents: torch.Tensor  # (computed rows, dim)
    host: torch.Tensor  # (computed rows,) long, on the host
    ready: Optional[torch.cuda.Event]

    @classmethod
    def launched(cls, rows: list[Row], codes: torch.Tensor, finite: torch.Tensor,
                 latents: torch.Tensor) -> InFlight[Row]:
        """The step that chose ``codes`` (from logits ``finite`` or not) and ``latents`` for ``rows``, its codes' copy
        to the host started. A row whose logits were not finite is read back as -1 (refused then); the next step's
        input keeps its code as chosen (an id the embedding has: that step's result is never read either)."""
        marked = torch.where(finite, codes, -1)
        if codes.device.type != "cuda":
            return cls(list(rows), list(range(len(rows))), codes, latents, marked, None)
        host = torch.empty(codes.shape, dtype=codes.dtype, pin_memory=True)
        host.copy_(marked, non_blocking=True)
        ready = torch.cuda.Event()
        ready.record()
        return cls(list(rows), list(range(len(rows))), codes, latents, host, ready)

    def kept(self, keep: list[int]) -> InFlight[Row]:
        """The same step with only rows ``keep`` (positions in :attr:`rows`) still in the batch, in that order."""
        return replace(self, rows=[self.rows[i] for i in keep], index=[self.index[i] for i in keep])

    def next_input(self) -> torch.Tensor:
        """The rows' codes on the device, in the batch's order: the next step's input (no wait for the device)."""
        if self.index == list(range(self.codes.shape[0])):
            return self.codes
        return self.codes.index_select(0, indices(self.index, self.codes.device))

    def read(self) -> tuple[list[int], list[torch.Tensor]]:
        """Each row's code (waiting for the copy to the host: the step's one wait) and its latent."""
        if self.ready is not None:
            self.ready.synchronize()
        every, latents = self.host.tolist(), self.latents.unbind(0)
        return [every[i] for i in self.index], [latents[i] for i in self.index]
