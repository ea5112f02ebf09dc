"""Multi-GPU and multi-node training through torch.distributed (launch with ``torchrun``).

When ``WORLD_SIZE`` > 1 (set by torchrun, with ``RANK`` and ``LOCAL_RANK``), :func:`setup_distributed`
initialises the process group (NCCL on GPUs, gloo on CPU) and the GPT is wrapped in
``DistributedDataParallel``. The loop calls the *wrapper* for the forward pass, so gradients are
all-reduced in backward (coqui's Trainer unwraps ``.module`` right after wrapping, so its ranks
very likely train separate copies). The batch sampler shards the data per rank; only rank 0
writes files and logs; every rank resumes from the checkpoint rank 0 chose; saves are bracketed
by collectives so no rank runs ahead of a failed save.

Several machines: the run folder may be on storage every machine sees or on each machine's own disk.
Checkpoints are written by rank 0 and read by rank 0 alone; a resume sends their state to the other ranks
through the process group (:meth:`MainFirst.share`). The stages that write files run on rank 0 first and
then on each other machine's local rank 0, where they find rank 0's outputs current (shared storage) or
make their own (node-local disks). A failure on any rank stops the others (xtts_ft/peers.py).
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
from dataclasses import dataclass
from typing import Callable, Iterator, Optional, TypeVar, cast

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

from xtts_ft.errors import ConfigError
from xtts_ft.peers import PeerBoard, PeerFailed, PeerWatch, first_line

log = logging.getLogger(__name__)

COLLECTIVE_TIMEOUT = datetime.timedelta(minutes=60)  # rank 0 may synthesise eval samples meanwhile
# How long the other ranks wait for rank 0's file-writing stages (a first prepare of many hours of audio
# can take longer than a training collective may); a CPU (gloo) group, so no GPU watchdog is involved.
STAGE_TIMEOUT = datetime.timedelta(hours=12)
SHARE_BUCKET_BYTES = 64 << 20  # tensors shared from rank 0 travel in pieces of this size (a checkpoint is ~5 GB)
T = TypeVar("T")


@dataclass(frozen=True)
class DistContext:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    initialized_here: bool
    peers: Optional[PeerWatch] = None  # under torchrun: ends this rank when another one fails (xtts_ft/peers.py)

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()

    def all_reduce_sum(self, tensor: torch.Tensor) -> None:
        if self.enabled:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)

    def all_true(self, flag: bool) -> bool:
        """True only if ``flag`` is True on every rank."""
        if not self.enabled:
            return flag
        t = torch.tensor([1.0 if flag else 0.0], device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        return bool(t.item() > 0)

    def broadcast_object(self, obj: T) -> T:
        """Rank 0's ``obj`` on every rank."""
        if not self.enabled:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def all_gather_object(self, obj: T) -> list[T]:
        if not self.enabled:
            return [obj]
        out: list[T] = [obj] * self.world_size  # every slot is replaced by that rank's object
        dist.all_gather_object(out, obj)
        return out


def pick_device(preference: str, local_rank: int) -> torch.device:
    if preference == "cpu":
        return torch.device("cpu")
    if torch.cuda.is_available():
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    if preference == "cuda":
        raise ConfigError("run.device: cuda was requested but torch sees no GPU; set run.device: auto or cpu")
    return torch.device("cpu")


def setup_distributed(device_preference: str) -> DistContext:
    """Read torchrun's environment; initialise the process group when there is more than one process."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    joins = world_size > 1 and not dist.is_initialized()
    # watching from before the group starts: a rank that fails before joining it (no GPU on its machine, say)
    # must not leave the others waiting in init_process_group for the collective timeout
    board = PeerBoard.from_env() if joins else None
    peers = PeerWatch(board).start() if board is not None else None
    ctx = DistContext(rank, world_size, local_rank, torch.device("cpu"), False, peers)
    with peer_failures(ctx):
        device = pick_device(device_preference, local_rank)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        if joins:
            backend = "nccl" if device.type == "cuda" else "gloo"
            kwargs = {"device_id": device} if device.type == "cuda" else {}
            dist.init_process_group(backend=backend, timeout=COLLECTIVE_TIMEOUT, **kwargs)
            log.info("process group: %s, rank %d of %d, device %s", backend, rank, world_size, device)
    return DistContext(rank, world_size, local_rank, device, joins, peers)


@contextlib.contextmanager
def peer_failures(ctx: DistContext) -> Iterator[None]:
    """Around a command's distributed part: an exception ending this rank is posted for the others, or, when
    another rank's failure is why this one ended (a collective broken by a peer that went away), replaced by
    that rank's line (xtts_ft/peers.py). Nothing changes outside torchrun."""
    try:
        yield
    except Exception as exc:
        instead = ctx.peers.failed(exc) if ctx.peers is not None else None
        if instead is None:
            raise
        raise instead from None


def wrap_model(model: nn.Module, ctx: DistContext) -> nn.Module:
    """DDP around the whole training model (only its GPT has trainable parameters); identity when single-process."""
    if not ctx.enabled:
        return model

    return DDP(
        model,
        device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None,
        broadcast_buffers=False,  # the frozen buffers (mel filters, stats) are identical on every rank
    )


class MainFirst:
    """Stages that write files run on rank 0 while the other ranks wait, then on the others.

    The pipeline's stages are idempotent: each records a hash of its inputs and is skipped when its
    outputs are current. So ``run(what, fn)`` runs ``fn`` on rank 0 alone; then, on a run dir every
    node sees, the other ranks call ``fn`` too and it only reads what rank 0 wrote. On storage a node
    does not share, ``fn`` finds nothing current and runs there: first on that node's local rank 0, then
    on its other ranks, so no two processes of one node write the same files at once (a node known to keep a
    folder of its own, ``own_folder``, runs it at the same time as rank 0 instead of after). A failure on any
    rank is sent to the others, which stop with :class:`PeerFailed` instead of waiting (rank 0 included:
    a stage that fails on another machine's disk stops the run before the next stage).
    The training loop's DVAE code cache is built the same way (a first build can outlast
    ``COLLECTIVE_TIMEOUT``; the waits here use the gloo group's ``STAGE_TIMEOUT``).

    ``share(what, fn)`` runs ``fn`` on rank 0 alone and hands its result to every rank through the group
    (what only rank 0's disk holds: the checkpoint a run resumes from); ``everywhere(what, fn)`` runs ``fn`` on
    every rank at once and stops them all when it fails on one.
    """

    def __init__(self, ctx: DistContext, own_folder: bool = False) -> None:
        self.ctx = ctx
        # this rank's machine keeps a run folder of its own (train/machine_folders.py): its local rank 0 runs a
        # stage at the same time as rank 0 (nothing of rank 0's to wait for), not after it
        self.own_folder = own_folder
        self._group = None

    def _group_once(self) -> dist.ProcessGroup:
        if self._group is None:  # created on first use; every rank reaches it in the same order
            self._group = dist.new_group(backend="gloo", timeout=STAGE_TIMEOUT)
        return self._group

    def _from_main(self, outcome: Optional[str]) -> str:
        box = [outcome]
        dist.broadcast_object_list(box, src=0, group=self._group_once())
        return box[0] or ""

    def gather(self, obj: T) -> list[T]:
        """Every rank's ``obj``, on every rank (the long-timeout gloo group)."""
        if not self.ctx.enabled:
            return [obj]
        out: list[T] = [obj] * self.ctx.world_size  # every slot is replaced by that rank's object
        dist.all_gather_object(out, obj, group=self._group_once())
        return out

    def _on_main(self, fn: Callable[[], T]) -> T:
        """Rank 0: ``fn()``, and its outcome (a failure's line, or none) to the ranks waiting in ``_after_main``."""
        try:
            result = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised; the others must not wait for it
            self._from_main(first_line(exc))
            raise
        self._from_main("")
        return result

    def _after_main(self, what: str) -> None:
        """Any other rank: wait for rank 0's ``fn()``; its failure stops this rank too."""
        failed = self._from_main(None)
        if failed:
            raise PeerFailed(f"{what}: rank 0 failed ({failed}); rank {self.ctx.rank} stopped too")

    def _stop_if_failed(self, what: str, errors: list[str]) -> None:
        failed = [(rank, e) for rank, e in enumerate(errors) if e and rank != self.ctx.rank]
        if failed:
            rank, error = failed[0]
            raise PeerFailed(f"{what}: rank {rank} failed ({error}); rank {self.ctx.rank} stopped too")

    def run(self, what: str, fn: Callable[[], T]) -> T:
        if not self.ctx.enabled:
            return fn()
        result: Optional[T] = None
        if self.ctx.is_main:
            result = self._on_main(fn)
            # the other nodes' local rank 0 run it meanwhile (a no-op on shared storage); one may fail there
            self._stop_if_failed(what, self.gather(""))
            return result
        first = self.ctx.local_rank == 0
        error: Optional[BaseException] = None

        def run_here() -> Optional[T]:
            nonlocal error
            try:
                return fn()
            except BaseException as exc:  # noqa: BLE001 - shared with the other ranks below, then re-raised
                error = exc
                return None

        if first and self.own_folder:
            result = run_here()
        self._after_main(what)
        if first and not self.own_folder:
            result = run_here()
        errors = self.gather(first_line(error) if error is not None else "")
        if error is not None:
            raise error
        self._stop_if_failed(what, errors)
        return cast(T, result) if first else fn()  # first: fn() returned it above

    def everywhere(self, what: str, fn: Callable[[], T]) -> T:
        """``fn()`` on every rank at once; when it fails on one, the others stop too (with that rank's line)."""
        if not self.ctx.enabled:
            return fn()
        try:
            result = fn()
        except BaseException as exc:  # noqa: BLE001 - shared with the other ranks, then re-raised
            self.gather(first_line(exc))
            raise
        self._stop_if_failed(what, self.gather(""))
        return result

    def share(self, what: str, fn: Callable[[], T]) -> T:
        """``fn()`` on rank 0 alone; its result on every rank. Tensors in it (nested in dicts, lists and tuples)
        travel as raw bytes in pieces of ``SHARE_BUCKET_BYTES``; the rest is pickled. No other rank reads rank 0's
        files, so this works when each machine has its own disk."""
        if not self.ctx.enabled:
            return fn()
        if self.ctx.is_main:
            result = self._on_main(fn)
            tensors: list[torch.Tensor] = []
            box: list[object] = [_without_tensors(result, tensors)]
            dist.broadcast_object_list(box, src=0, group=self._group_once())
            _stream_bytes([t.detach().to("cpu").contiguous() for t in tensors], self._group_once(), send=True)
            return result
        self._after_main(what)
        box = [None]
        dist.broadcast_object_list(box, src=0, group=self._group_once())
        received: list[torch.Tensor] = []
        skeleton = _make_room(box[0], received)
        _stream_bytes(received, self._group_once(), send=False)
        return cast(T, _with_tensors(skeleton, received))


@dataclass(frozen=True)
class _TensorSlot:
    """Where a shared tensor goes back, and what to allocate for it."""

    index: int
    shape: tuple[int, ...]
    dtype: torch.dtype


def _leaves_replaced(value: object, leaf: Callable[[object], object]) -> object:
    """``value`` with each tensor or :class:`_TensorSlot` in it replaced by ``leaf(it)``, in a fixed order (dicts,
    lists and tuples are rebuilt around them; anything else stays as it is)."""
    if isinstance(value, (torch.Tensor, _TensorSlot)):
        return leaf(value)
    if isinstance(value, dict):
        return {k: _leaves_replaced(v, leaf) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        items = [_leaves_replaced(v, leaf) for v in value]
        return items if isinstance(value, list) else tuple(items)
    return value


def _without_tensors(value: object, tensors: list[torch.Tensor]) -> object:
    """``value`` with every tensor replaced by a :class:`_TensorSlot` (the tensors appended to ``tensors``)."""

    def slot(tensor: object) -> object:
        assert isinstance(tensor, torch.Tensor)
        tensors.append(tensor)
        return _TensorSlot(len(tensors) - 1, tuple(tensor.shape), tensor.dtype)

    return _leaves_replaced(value, slot)


def _make_room(skeleton: object, tensors: list[torch.Tensor]) -> object:
    """An empty tensor for each slot of ``skeleton`` (appended to ``tensors`` in slot order)."""

    def room(slot: object) -> object:
        assert isinstance(slot, _TensorSlot)
        tensors.append(torch.empty(slot.shape, dtype=slot.dtype))
        return slot

    return _leaves_replaced(skeleton, room)


def _with_tensors(skeleton: object, tensors: list[torch.Tensor]) -> object:
    return _leaves_replaced(skeleton, lambda slot: tensors[slot.index] if isinstance(slot, _TensorSlot) else slot)


def _stream_bytes(tensors: list[torch.Tensor], group: dist.ProcessGroup, *, send: bool,
                  bucket_bytes: int = SHARE_BUCKET_BYTES) -> None:
    """The bytes of ``tensors`` (contiguous, on the CPU) from rank 0 into the same-shaped ``tensors`` of the others,
    one bucket at a time (any dtype: each tensor is seen as its bytes)."""
    bucket = torch.empty(bucket_bytes, dtype=torch.uint8)
    pieces: list[tuple[torch.Tensor, int, int, int]] = []  # (byte view, its offset, bucket offset, length)
    filled = 0

    def flush() -> None:
        nonlocal filled
        if filled:
            dist.broadcast(bucket[:filled], src=0, group=group)
            if not send:
                for view, offset, at, length in pieces:
                    view[offset:offset + length].copy_(bucket[at:at + length])
        pieces.clear()
        filled = 0

    for tensor in tensors:
        view = tensor.reshape(-1).view(torch.uint8)
        offset = 0
        while offset < view.numel():
            length = min(view.numel() - offset, bucket_bytes - filled)
            if send:
                bucket[filled:filled + length].copy_(view[offset:offset + length])
            pieces.append((view, offset, filled, length))
            filled += length
            offset += length
            if filled == bucket_bytes:
                flush()
    flush()


def cleanup_distributed(ctx: DistContext) -> None:
    if ctx.peers is not None:
        ctx.peers.close()  # the run has ended: its own end is not cut short by another rank's
    if ctx.initialized_here and dist.is_initialized():
        dist.destroy_process_group()
