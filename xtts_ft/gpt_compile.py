"""``training.compile``: the GPT-2 blocks of the fast training forward under ``torch.compile``.

One function is compiled, :func:`xtts_ft.gpt_forward.block_forward`, and every block runs through it
(torch >= 2.5 lifts the modules' weights into graph inputs, so the 30 blocks of XTTS-v2 share one
compiled graph per shape: "regional compilation", seconds instead of minutes). Shapes are static
(``dynamic=False``) and bounded: a batch's length is rounded up to a multiple of
:func:`bucket_width` (``ceil(longest possible row / LENGTH_BUCKETS)``, rounded up to 8), so a run
compiles once per length bucket it meets, at most ``LENGTH_BUCKETS`` (6) times for its batch size
(the sampler's batches are all the same size); a batch of another size (an out-of-memory split) is
another shape. Past ``MAX_SHAPES`` (8: torch's own recompile limit) a new shape runs eager.
Evaluation (no gradients) runs eager: its graphs would be as many again for a small share of the time.
So do blocks with forward hooks (the stability layer's diagnosis of a non-finite batch hooks every
module: eager, each hook fires as without compile) and the batch-size probe (:meth:`paused`: its
many sizes are not worth compiling; compiled blocks usually need less memory than eager ones).

Each first call of a shape compiles forward *and* backward at once (a warm-up backward on a dummy
input, the random streams put back), so its time is known and shown (``compile_seconds``), the ETA
counts it (:meth:`CompiledBlocks.pending_seconds`), and a failure of either surfaces here: the run
falls back to eager blocks with one warning line naming the error. Out-of-memory errors are not
compile failures: they go to the out-of-memory split as before.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from typing import Callable, Iterator, Optional, Protocol, Union

import torch
import torch.nn as nn
from torch._dynamo.exc import TorchDynamoException
from torch._inductor.exc import InductorError

from xtts_ft.gpt_forward import EAGER, BlockFn, any_hooks, block_forward, conditioning_length, run_blocks

log = logging.getLogger(__name__)

LENGTH_BUCKETS = 6  # compiled lengths per batch size, at most
MAX_SHAPES = 8  # torch._dynamo.config.recompile_limit's default: more shapes would be refused by torch anyway
COMPILE_ERRORS = (TorchDynamoException, InductorError)  # what a failed torch.compile raises


class CompiledGraph(Protocol):
    """What a compiler backend gives back for a traced graph: called with the graph's tensors in its place."""

    def __call__(self, *inputs: torch.Tensor) -> object: ...


#: A torch.compile backend given as a function: the traced graph and example inputs -> what runs in its place.
CompilerBackend = Callable[[torch.fx.GraphModule, list[torch.Tensor]], CompiledGraph]


class CompileFn(Protocol):
    """torch.compile as this module calls it (tests pass one that returns the function uncompiled)."""

    def __call__(self, fn: BlockFn, *, backend: Union[str, CompilerBackend], dynamic: bool) -> BlockFn: ...


#: One compiled shape: (batch, length, dtype the blocks compute in, training mode).
ShapeKey = tuple[int, int, torch.dtype, bool]


def compile_enabled(setting: Union[str, bool], device: torch.device) -> bool:
    """``training.compile``: on / true, off / false, auto (= on for CUDA)."""
    if setting in ("auto", None):
        return bool(device.type == "cuda")
    return setting in ("on", True)


def longest_row(gpt: nn.Module) -> int:
    """The most positions one row of the GPT's training forward can have (conditioning + text + audio)."""
    # coqui's maxima include the start/stop positions
    return conditioning_length(gpt) + int(gpt.max_text_tokens) + int(gpt.max_mel_tokens)


def bucket_width(longest: int) -> int:
    """The multiple a compiled batch's length is rounded up to: LENGTH_BUCKETS buckets cover ``longest``."""
    return 8 * math.ceil(math.ceil(longest / LENGTH_BUCKETS) / 8)


def describe_failure(exc: BaseException) -> str:
    """One line: the compiler's error and the first line of what caused it (the backend's own error)."""
    root = getattr(exc, "inner_exception", None) or exc
    while root.__cause__ is not None:
        root = root.__cause__
    first = next((line.strip() for line in str(root).splitlines() if line.strip()), "")[:300]
    where = f"{type(exc).__name__}: " if root is not exc else ""
    return f"{where}{type(root).__name__}: {first}"


def _is_out_of_memory(exc: BaseException) -> bool:
    cause: Optional[BaseException] = exc
    while cause is not None:
        if isinstance(cause, torch.OutOfMemoryError):
            return True
        cause = getattr(cause, "inner_exception", None) or cause.__cause__
    return False


class CompiledBlocks:
    """A ``gpt_forward.BlockRunner`` that runs the blocks compiled (see the module doc).

    ``backend``: torch.compile's (inductor; tests inject a failing one); ``compile_fn``: torch.compile.
    """

    def __init__(self, longest: int, *, backend: Union[str, CompilerBackend] = "inductor",
                 compile_fn: CompileFn = torch.compile) -> None:
        self.width = bucket_width(longest)
        self.buckets = math.ceil(longest / self.width)
        self._fn = compile_fn(block_forward, backend=backend, dynamic=False)
        self.failed: Optional[str] = None  # the one line of a compile failure (then eager for the rest of the run)
        self.shapes: dict[ShapeKey, float] = {}  # (batch, length, dtype) -> seconds its compile took
        self._eager_shapes: set[ShapeKey] = set()
        self._paused = 0

    def expect_lengths(self, shortest: int, longest: int) -> None:
        """The run's rows are ``shortest``..``longest`` positions long: only their buckets can come (the ETA's
        pending compiles, the count logged)."""
        self.buckets = max(1, math.ceil(longest / self.width) - math.ceil(shortest / self.width) + 1)
        log.info("training.compile: rows of %d-%d positions, rounded up to a multiple of %d: at most %d compiles",
                 shortest, longest, self.width, min(self.buckets, MAX_SHAPES))

    @property
    def compile_seconds(self) -> float:
        return sum(self.shapes.values())

    def pending_seconds(self) -> float:
        """Compile time still to come: the length buckets not yet met, at the mean compile time so far."""
        if self.failed or not self.shapes:
            return 0.0
        met = len({key[1] for key in self.shapes})
        left = min(self.buckets - met, MAX_SHAPES - len(self.shapes))
        return max(0, left) * self.compile_seconds / len(self.shapes)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """The blocks run eager inside (lengths are still rounded up: what the probe measures is what runs)."""
        self._paused += 1
        try:
            yield
        finally:
            self._paused -= 1

    def padded_length(self, length: int) -> int:
        if self.failed or not torch.is_grad_enabled():
            return length
        return self.width * math.ceil(length / self.width)

    def run(self, blocks: nn.ModuleList, x: torch.Tensor, *, checkpointing: bool) -> torch.Tensor:
        if self.failed or self._paused or not torch.is_grad_enabled() or any_hooks(blocks):
            return EAGER.run(blocks, x, checkpointing=checkpointing)
        key: ShapeKey = (x.shape[0], x.shape[1], torch.get_autocast_dtype(x.device.type)
               if torch.is_autocast_enabled(x.device.type) else x.dtype, blocks[0].training)
        if key not in self.shapes:
            if len(self.shapes) >= MAX_SHAPES:
                if key not in self._eager_shapes:
                    self._eager_shapes.add(key)
                    log.info("training.compile: %d shapes compiled already; batch %d x %d positions runs eager",
                             len(self.shapes), key[0], key[1])
                return EAGER.run(blocks, x, checkpointing=checkpointing)
            if not self._compile(blocks[0], x, key):
                return EAGER.run(blocks, x, checkpointing=checkpointing)
        return run_blocks(self._fn, blocks, x, checkpointing=checkpointing)

    def _compile(self, block: nn.Module, x: torch.Tensor, key: ShapeKey) -> bool:
        """Compile forward and backward for ``x``'s shape on a dummy input; False (and one line) on failure."""
        started = time.perf_counter()
        devices = [x.device] if x.device.type == "cuda" else []
        try:
            with torch.random.fork_rng(devices=devices):
                dummy = torch.zeros_like(x, requires_grad=True)
                torch.autograd.grad(self._fn(block, dummy).sum(), dummy)  # no parameter's .grad is touched
        except COMPILE_ERRORS as exc:
            if _is_out_of_memory(exc):
                raise
            self.failed = describe_failure(exc)
            log.warning("training.compile: torch.compile failed (%s); the GPT blocks run without compiling",
                        self.failed)
            return False
        if x.device.type == "cuda":
            torch.cuda.synchronize(x.device)
        seconds = time.perf_counter() - started
        self.shapes[key] = seconds
        log.info("training.compile: GPT blocks compiled for batch %d x %d positions in %.1f s (shape %d of at most "
                 "%d; %.1f s compiling so far)", key[0], key[1], seconds, len(self.shapes),
                 min(self.buckets, MAX_SHAPES), self.compile_seconds)
        return True
