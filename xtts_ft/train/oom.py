"""Out of GPU memory in the middle of a run: split the micro-batch, skip a clip that does not fit alone.

A long outlier batch (or allocator fragmentation) can run out of memory although the batch size fit
at the start. Instead of losing the run, :class:`MicroBatchRunner` runs each micro-batch of an
optimizer step through a ``forward`` and a ``backward`` callable and, on an out-of-memory error
(``torch.OutOfMemoryError`` or a cuDNN/cuFFT/cuBLAS workspace failure: ``memory.is_out_of_memory``):

- in the forward: nothing of this micro-batch has reached the gradients; memory is released and the
  micro-batch is split in halves, each run on its own with its loss weighted by its share of the
  clips (a half that still does not fit is split again);
- in the backward: part of this micro-batch's gradient may already be in ``.grad``, so the
  gradients of the whole accumulation window are cleared (the clips that had reached them are
  counted as skipped), then the micro-batch is split as above;
- a single clip that does not fit is skipped, counted and named in a warning.

Every micro-batch is still consumed once, so the sampler position advances exactly as without the
error (exact resume is unaffected). :meth:`MicroBatchRunner.finish` rescales the gradients when
clips were dropped, so the step is the mean over the clips that counted; when none did, the loop
skips the optimizer step. Weighting is per clip: a piece's loss (a token-weighted mean inside the
piece, as the GPT computes it) counts with its share of the clips.

Counters ``oom_split`` (micro-batches split) and ``oom_skipped`` (clips whose gradient was dropped)
live on ``counters`` (the loop's StabilityGuard: saved with checkpoints, written to metrics.jsonl).
Memory is released outside the ``except`` block: the exception's traceback holds the failed pass's
activations until it is gone.

Multi-process (DDP) runs do not split: ranks would disagree on the number of synchronised backward
passes and the all-reduce would hang, so there an out-of-memory error stops the run with advice.
"""

from __future__ import annotations

import logging
from typing import Callable, Optional, TypedDict, Union, cast

import torch

from xtts_ft.errors import TrainingStopped
from xtts_ft.train.data import Batch
from xtts_ft.train.memory import is_out_of_memory, release_memory
from xtts_ft.train.stability import StabilityGuard

log = logging.getLogger(__name__)

Forward = Callable[[Batch], tuple[torch.Tensor, torch.Tensor]]  # piece -> (loss to backpropagate, detached loss row)
Backward = Callable[[torch.Tensor], None]  # weighted loss -> backward pass
# "pass" (the pass that ran out of memory) is a keyword in Python, hence this spelling of the type
_OomEventDetails = TypedDict("_OomEventDetails", {"size": int, "pass": str}, total=False)


class OomEvent(_OomEventDetails):
    """One event of a window for events.jsonl: its name ("oom_split", "oom_skip", "oom_cleared") and fields."""

    event: str
    clips: Union[int, str]  # how many, or their names


_TRIM = {"padded_text": "text_lengths", "wav": "wav_lengths"}  # padded tensor -> the lengths that bound it


def batch_len(batch: Batch) -> int:
    return int(batch["clips"].shape[0])


def split_batch(batch: Batch) -> tuple[Batch, Batch]:
    """The first and second half of a collated batch (every batch-first tensor sliced, padding trimmed)."""
    n = batch_len(batch)
    half = n // 2
    pieces: list[Batch] = []
    for sl in (slice(0, half), slice(half, n)):
        piece = {k: (v[sl] if isinstance(v, torch.Tensor) and v.dim() > 0 and v.shape[0] == n else v)
                 for k, v in batch.items()}
        for key, lengths in _TRIM.items():
            padded, bound = piece.get(key), piece.get(lengths)  # no wav when the codes are cached
            if isinstance(padded, torch.Tensor) and isinstance(bound, torch.Tensor):
                piece[key] = padded[..., : int(bound.max())]
        pieces.append(cast(Batch, piece))  # batch's own keys, each value cut to the half's rows
    return pieces[0], pieces[1]


class MicroBatchRunner:
    """Runs the micro-batches of one optimizer step; see the module doc."""

    def __init__(self, *, counters: StabilityGuard, device: torch.device, describe: Callable[[Batch], str],
                 zero_grads: Callable[[], None], recover: bool = True) -> None:
        self.counters, self.device, self.describe = counters, device, describe
        self.zero_grads, self.recover = zero_grads, recover
        self.events: list[OomEvent] = []  # this window's (train/step.py logs them)
        self._nominal = self._counted = 0

    def begin(self) -> None:
        """Start an accumulation window."""
        self._nominal = self._counted = 0
        self.events = []

    def run(self, batch: Batch, weight_per_clip: float, forward: Forward, backward: Backward, *,
            step: int) -> Optional[torch.Tensor]:
        """Forward and backward of one micro-batch (split on OOM); its clip-weighted loss row, None if nothing ran."""
        self._nominal += batch_len(batch)
        pending: list[Batch] = [batch]
        rows: list[tuple[torch.Tensor, int]] = []  # (clip-weighted loss row, clips) per piece that ran
        while pending:
            piece = pending.pop(0)
            n = batch_len(piece)
            failed = self._attempt(piece, n * weight_per_clip, forward, backward, rows)
            if failed is None:
                self._counted += n
                continue
            release_memory(self.device)
            names = self.describe(piece)
            if not self.recover:
                raise TrainingStopped(
                    f"out of GPU memory at step {step + 1} in the {failed} pass of {n} clip(s) ({names}); a "
                    f"multi-GPU run cannot split a batch. Lower training.batch_size (or use auto), enable "
                    f"training.gradient_checkpointing or training.offload_frozen, or lower dataset.max_duration_s; "
                    f"rerun the same command to resume")
            if failed == "backward" and self._counted:
                dropped, self._counted = self._counted, 0
                self.counters.oom_skipped += dropped
                log.warning("out of GPU memory in a backward pass at step %d: gradients of the %d clip(s) before it in "
                            "this step were cleared (a failed backward leaves partial gradients)", step + 1, dropped)
                self.events.append({"event": "oom_cleared", "clips": dropped})
            if failed == "backward":
                self.zero_grads()
            if n == 1:
                self.counters.oom_skipped += 1
                log.warning("out of GPU memory at step %d: clip %s does not fit even alone and is skipped in this "
                            "step; enable training.gradient_checkpointing or lower dataset.max_duration_s",
                            step + 1, names)
                self.events.append({"event": "oom_skip", "clips": names, "pass": failed})
                continue
            self.counters.oom_split += 1
            first, second = split_batch(piece)
            log.warning("out of GPU memory in the %s pass at step %d on %d clips (%s): split into %d + %d", failed,
                        step + 1, n, names, batch_len(first), batch_len(second))
            self.events.append({"event": "oom_split", "clips": names, "size": n, "pass": failed})
            pending[:0] = [first, second]
        if len(rows) <= 1:
            return rows[0][0] if rows else None
        total = sum(n for _, n in rows)
        return sum(row * (n / total) for row, n in rows)

    @staticmethod
    def _attempt(piece: Batch, weight: float, forward: Forward, backward: Backward,
                 rows: list[tuple[torch.Tensor, int]]) -> Optional[str]:
        """None when the piece ran; else the pass ('forward' / 'backward') that ran out of memory."""
        phase = "forward"
        try:
            loss, row = forward(piece)
            phase = "backward"
            backward(loss * weight)
        except RuntimeError as exc:  # torch.OutOfMemoryError is one; any other error is raised
            if not is_out_of_memory(exc):
                raise
            return phase
        rows.append((row, batch_len(piece)))
        return None

    def finish(self, grads: list[Optional[torch.Tensor]]) -> int:
        """Rescale ``grads`` to the mean over the clips that counted; returns their number (0: skip the step)."""
        if 0 < self._counted < self._nominal:
            factor = self._nominal / self._counted
            for g in grads:
                if g is not None:
                    g.mul_(factor)
        return self._counted
