"""The training batch order: shuffled per epoch from (seed, epoch), sharded per rank, resumable.

Every epoch's batches are a pure function of ``(seed, epoch, rank, world_size)``:

1. a permutation of all clip indices from a generator seeded with ``(seed, epoch)`` (identical on
   every rank), padded by wrapping around to a multiple of ``world_size`` and dealt out
   round-robin, like ``torch.utils.data.DistributedSampler`` (ranks see disjoint clips);
2. optionally length bucketing: the rank's share is cut into windows of ``BUCKET_BATCHES``
   batches, each window sorted by clip length and split into batches, and the batch order is
   shuffled again (less padding, still random);
3. the last incomplete batch is dropped, so every rank runs the same number of equal-sized
   batches (the dropped clips differ from epoch to epoch).

The sampler is infinite (epoch after epoch); each item it yields is a :class:`ItemKey` that
carries the position, so the training loop knows exactly which batch it consumed even when
worker processes prefetch ahead. ``position`` = (epoch, batch_index) of the next batch to
consume; saving it and passing it back as ``start`` resumes the order exactly.
"""

from __future__ import annotations

from typing import Iterator, NamedTuple, Sequence

import torch

from xtts_ft.errors import DataError
from xtts_ft.training_state import SamplerState

BUCKET_BATCHES = 32  # batches per length-sorting window


class ItemKey(NamedTuple):
    """What the dataset needs to produce one training item deterministically."""

    clip: int  # index into the dataset's clip list
    epoch: int
    batch_index: int  # position of the batch in this rank's epoch
    slot: int  # position of the item inside its batch
    rank: int


def _generator(*words: int) -> torch.Generator:
    seed = 0
    for w in words:  # a small, stable mix of the words into one 63-bit seed
        seed = (seed * 1_000_003 + int(w) + 0x9E3779B9) % (2**63 - 1)
    return torch.Generator().manual_seed(seed)


class ResumableBatchSampler:
    """An infinite, per-epoch shuffled, rank-sharded batch sampler whose position can be saved."""

    def __init__(
        self,
        lengths: Sequence[int],
        batch_size: int,
        seed: int,
        *,
        rank: int = 0,
        world_size: int = 1,
        bucketing: bool = True,
        start: tuple[int, int] = (0, 0),
    ):
        self.lengths = list(lengths)
        self.batch_size = int(batch_size)
        self.seed = int(seed)
        self.rank = int(rank)
        self.world_size = int(world_size)
        self.bucketing = bool(bucketing)
        per_rank = -(-len(self.lengths) // self.world_size)
        if per_rank < self.batch_size:
            raise DataError(
                f"training set: {len(self.lengths)} usable clips cannot fill one batch of {self.batch_size} on "
                f"each of {self.world_size} process(es); lower training.batch_size or add clips"
            )
        self.batches_per_epoch = per_rank // self.batch_size
        self.position = self._normalise(*start)

    def _normalise(self, epoch: int, batch_index: int) -> tuple[int, int]:
        epoch += batch_index // self.batches_per_epoch
        return int(epoch), int(batch_index % self.batches_per_epoch)

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        """This rank's batches (lists of clip indices) for ``epoch``."""
        n = len(self.lengths)
        order = torch.randperm(n, generator=_generator(self.seed, epoch)).tolist()
        total = -(-n // self.world_size) * self.world_size
        order = (order * (total // n + 1))[:total]  # wrap around so every rank gets the same count
        mine = order[self.rank :: self.world_size]
        if self.bucketing:
            window = self.batch_size * BUCKET_BATCHES
            by_length = self.lengths.__getitem__
            mine = [i for s in range(0, len(mine), window) for i in sorted(mine[s : s + window], key=by_length)]
        size = self.batch_size
        batches = [mine[s : s + size] for s in range(0, self.batches_per_epoch * size, size)]
        if self.bucketing:
            perm = torch.randperm(len(batches), generator=_generator(self.seed, epoch, 1)).tolist()
            batches = [batches[i] for i in perm]
        return batches

    def next_position(self, epoch: int, batch_index: int) -> tuple[int, int]:
        """Position after consuming batch (epoch, batch_index)."""
        return self._normalise(epoch, batch_index + 1)

    def __iter__(self) -> Iterator[list[ItemKey]]:
        epoch, index = self.position
        while True:
            batches = self.epoch_batches(epoch)
            for b in range(index, len(batches)):
                yield [ItemKey(clip, epoch, b, slot, self.rank) for slot, clip in enumerate(batches[b])]
            epoch, index = epoch + 1, 0

    def state_dict(self, consumed_position: tuple[int, int]) -> SamplerState:
        return {
            "epoch": int(consumed_position[0]),
            "batch_index": int(consumed_position[1]),
            "world_size": self.world_size,
            "seed": self.seed,
            "batch_size": self.batch_size,
            "num_clips": len(self.lengths),
        }
