"""The batch's key/value cache, written in place, and the one-code step of XTTS's GPT-2 blocks over it.

The first batched decoder handed Hugging Face's GPT-2 a ``DynamicCache`` rebuilt at every step, which
concatenates every layer's keys and values with the new column: the whole cache copied once per code
(at 16 rows of the full-size model on a CPU, 38 % of the step's time, measured with torch's profiler).
Here each layer's keys and values live in buffers of shape (rows, heads, columns, head_dim) that are
written one column per step:

- rows ``[0, n)`` are the batch, in the decoder's order; a row's real positions are the columns
  ``[first[row], end)``: every row writes its next position at the same column ``end``, so rows whose
  prefixes differ in length are left-padded (a boolean mask hides the padding). coqui's GPT-2 adds no
  position inside the blocks (``wpe`` gives zeros; the audio position is in each row's input
  embedding), so the padding changes no position;
- the step attends over the window ``[start, end]`` only (``start`` = the earliest real column of any
  row); when a row leaves, the rows after it move up and the window shrinks to what the others need;
- when the buffers are full the window is moved to the left edge with free columns after it again
  (the buffers are allocated again when they are too small, or more than twice what is needed):
  a copy of the window every so many steps instead of the whole cache at every step; when the last
  row leaves, the buffers are freed.

The step runs the blocks' own modules (``ln_1``, ``c_attn``, ``c_proj``, ``ln_2``, ``mlp``, the
model's ``ln_f``) and the attention Hugging Face's GPT-2 calls (SDPA, its scale, no mask when no row
is padded), so a row alone computes what ``GPT2Model`` computes with its cache
(tests/inference/test_batch_decode.py compares the two, and coqui's codes).
"""

from __future__ import annotations

import functools
from typing import Optional, Protocol

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers.activations import NewGELUActivation

HEADROOM_COLUMNS = 128  # free columns after the window when it is laid out (then one copy per 128 steps at most)


class FixedStep(Protocol):
    """A step that computes :meth:`SlotCache.window_step`'s numbers its own way (:class:`.decode_graph.FixedShapeStep`)."""

    def run(self, cache: SlotCache, embeddings: torch.Tensor) -> torch.Tensor: ...


def unsupported(gpt: nn.Module) -> Optional[str]:
    """Why ``gpt``'s GPT-2 cannot use this cache (one line), or None."""
    hf = gpt.gpt
    if not isinstance(hf.wpe, functools.partial):
        return "the GPT-2 model has learned absolute position embeddings (coqui's XTTS replaces them)"
    if getattr(hf.config, "_attn_implementation", None) != "sdpa":
        return f"the GPT-2 model's attention is {hf.config._attn_implementation!r}, not 'sdpa'"
    if getattr(hf.config, "add_cross_attention", False) or getattr(hf.config, "reorder_and_upcast_attn", False):
        return "the GPT-2 model has cross-attention or reordered attention"
    return None


class SlotCache:
    """Keys and values of every row being decoded; :meth:`step` runs the GPT-2 blocks for one position."""

    #: keep the buffers when the last row leaves (:class:`.decode_graph.StaticSlotCache`: a step recorded as a
    #: CUDA graph holds their addresses); here they are freed and the next request allocates what it needs
    keep_when_empty = False

    def __init__(self, transformer: nn.Module) -> None:
        self.transformer = transformer  # Hugging Face's GPT2Model inside coqui's GPT (``gpt.gpt``)
        self.keys: list[torch.Tensor] = []  # per layer (rows, heads, columns, head_dim)
        self.values: list[torch.Tensor] = []
        self.mask: Optional[torch.Tensor] = None  # (rows, columns) bool: True where a row has a real position
        self.first: list[int] = []  # per row: its first real column
        self.start = 0  # window [start, end): the columns some row uses
        self.end = 0  # the column the next step writes
        self._longest = 0  # the longest prefix seen: the room kept left of the window when it is laid out again
        self.layouts = 0  # times the buffers were allocated again (a copy of the window each)

    @property
    def rows(self) -> int:
        return len(self.first)

    # --- layout ------------------------------------------------------------------------------
    def _fit(self, prefix: int, like: torch.Tensor) -> None:
        """Room for a new row of ``prefix`` columns ending at ``end`` (0: no new row) and for the next step's column."""
        rows, columns = self.mask.shape if self.mask is not None else (0, 0)
        width = self.end - self.start
        need_rows = self.rows + (1 if prefix else 0)
        before = max(width, prefix)  # columns that must exist left of ``end``
        self._longest = max(self._longest, prefix)
        # When laid out again, the window ends where the longest prefix seen still fits left of it, with
        # HEADROOM_COLUMNS free after it, so the copy happens once per so many steps (about 2 % of what the
        # steps' attention reads meanwhile). The buffers keep their shape while it is within 2x of what is
        # needed; else they are allocated again at the needed size. Laying out allocates new buffers either way.
        new_end = max(before, self._longest)
        needed_columns = new_end + HEADROOM_COLUMNS
        room = need_rows <= rows and before <= self.end < columns
        if room and columns <= 2 * needed_columns and rows <= 2 * max(need_rows, 1):
            return
        if not needed_columns <= columns <= 2 * needed_columns:
            columns = new_end + 2 * HEADROOM_COLUMNS
        if not need_rows <= rows <= 2 * max(need_rows, 1):
            rows = 1 << max(need_rows - 1, 0).bit_length()  # a power of two: rows join one by one
        self._relayout(rows, columns, new_end, like)

    def _relayout(self, rows: int, columns: int, new_end: int, like: torch.Tensor) -> None:
        self.layouts += 1
        n, width = self.rows, self.end - self.start
        new_start = new_end - width

        def moved(old: Optional[torch.Tensor], shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
            # zeros, not empty: a masked column still enters the attention's products and must be finite
            new = torch.zeros(shape, dtype=dtype, device=like.device)
            if old is not None and n:
                window_columns(new, new_start, new_end)[:n] = window_columns(old, self.start, self.end)[:n]
            return new

        heads = self.transformer.config.n_head
        head_dim = self.transformer.config.n_embd // heads
        kv_shape = (rows, heads, columns, head_dim)
        dtype = self.keys[0].dtype if self.keys else like.dtype  # the prefill's (autocast's) dtype, kept
        layers = len(self.transformer.h)
        self.keys = [moved(k, kv_shape, dtype) for k in self.keys] or [
            moved(None, kv_shape, dtype) for _ in range(layers)]
        self.values = [moved(v, kv_shape, dtype) for v in self.values] or [
            moved(None, kv_shape, dtype) for _ in range(layers)]
        self.mask = moved(self.mask, (rows, columns), torch.bool)
        self.first = [f - self.start + new_start for f in self.first]
        self.start, self.end = new_start, new_end

    # --- rows --------------------------------------------------------------------------------
    def add(self, keys: list[torch.Tensor], values: list[torch.Tensor]) -> None:
        """A new last row from its prefill's per-layer keys and values, each (1, heads, prefix, head_dim)."""
        prefix = keys[0].shape[2]
        self._fit(prefix, keys[0])
        assert self.mask is not None
        row, begin = self.rows, self.end - prefix
        for buf, k in zip(self.keys, keys):
            buf[row, :, begin:self.end] = k[0]
        for buf, v in zip(self.values, values):
            buf[row, :, begin:self.end] = v[0]
        self.mask[row] = False
        self.mask[row, begin:self.end] = True
        self.first.append(begin)
        self.start = min(self.first)

    def keep(self, index: list[int]) -> None:
        """Keep only rows ``index`` (in that order) as rows ``0..len(index)-1``; the window shrinks to what they use."""
        n = self.rows
        if index == list(range(n)):
            return
        self.first = [self.first[i] for i in index]
        if not index and self.keep_when_empty and self.mask is not None:
            # empty, buffers kept: the next row's prefix ends where the longest one seen fits (else it lays out again)
            self.mask[:] = False
            self.start = self.end = min(self._longest, self.mask.shape[1] - 1)
            return
        if not index:  # empty: the memory goes back (the next request allocates what it needs)
            self.keys, self.values, self.mask = [], [], None
            self.start = self.end = self._longest = 0
            return
        assert self.mask is not None
        rows = indices(index, self.mask.device)
        m = len(index)
        for buffers in (self.keys, self.values):
            for buf in buffers:
                window = window_columns(buf, self.start, self.end)
                window[:m] = window.index_select(0, rows)
        self.mask[:m] = self.mask.index_select(0, rows)
        self.mask[m:n] = False
        self.start = min(self.first)
        self._fit(0, self.keys[0])  # far fewer rows or columns than the buffers hold: smaller buffers

    # --- the step ----------------------------------------------------------------------------
    def step(self, embeddings: torch.Tensor, fixed: Optional[FixedStep] = None) -> torch.Tensor:
        """Every row's next position from its input embedding (rows, 1, dim): the final-layer-normed hidden state
        (rows, dim), as ``GPT2Model`` gives it (``last_hidden_state``). ``fixed``: run it through a fixed-shape
        step instead (:mod:`.decode_graph`: a CUDA graph replayed), which may call :meth:`window_step` itself."""
        if embeddings.shape[0] != self.rows:
            raise ValueError(f"{embeddings.shape[0]} embeddings for {self.rows} rows")
        self._fit(0, embeddings)
        assert self.mask is not None
        # Every buffer row, not only the batch's: the rows past it are what a fixed-shape step computes too, and
        # this column (their own) keeps their attention finite (a row with nothing to attend to gives NaN).
        self.mask[:, self.end] = True
        hidden = self.window_step(embeddings) if fixed is None else fixed.run(self, embeddings)
        self.end += 1
        return hidden

    def window_step(self, embeddings: torch.Tensor) -> torch.Tensor:
        """The step's blocks over the attended window only (shapes vary with the rows and the window)."""
        assert self.mask is not None
        n, col = self.rows, self.end
        padded = any(f != self.start for f in self.first)
        mask = additive(self.mask[:n, None, None, self.start:col + 1], embeddings.dtype) if padded else None
        x = embeddings
        for block, keys, values in zip(self.transformer.h, self.keys, self.values):
            x = self._block(block, x, keys, values, mask, n, col)
        return self.transformer.ln_f(x)[:, -1]

    def fixed_shape(self) -> tuple[int, int]:
        """The (rows, columns) of the buffers that :meth:`every_row_step` computes over: here all of them."""
        assert self.mask is not None
        rows, columns = self.mask.shape
        return rows, columns

    def every_row_step(self, embeddings: torch.Tensor, column: torch.Tensor, fused_gelu: bool = False) -> torch.Tensor:
        """The step's blocks for the first rows and columns of the buffers (:meth:`fixed_shape`), the column written
        given as a tensor (1,): the same numbers for the batch's rows as :meth:`window_step` (the extra rows and
        columns are masked), and no shape or index that changes from step to step, which is what a CUDA graph
        can replay. ``embeddings``: (fixed rows, 1, dim), the batch's rows first. ``fused_gelu``: :func:`mlp`'s."""
        assert self.mask is not None
        rows, columns = self.fixed_shape()
        mask = additive(self.mask[:rows, None, None, :columns], embeddings.dtype)
        x = embeddings
        for block, keys, values in zip(self.transformer.h, self.keys, self.values):
            x = self._block(block, x, keys[:rows, :, :columns], values[:rows, :, :columns], mask, rows, column,
                            fused_gelu)
        return self.transformer.ln_f(x)[:, -1]

    def _block(self, block: nn.Module, x: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
               mask: Optional[torch.Tensor], n: int, col: int | torch.Tensor, fused_gelu: bool = False) -> torch.Tensor:
        attn = block.attn
        q, k, v = attn.c_attn(block.ln_1(x)).split(attn.split_size, dim=2)
        shape = (n, 1, -1, attn.head_dim)
        q = q.view(shape).transpose(1, 2)
        if isinstance(col, torch.Tensor):  # every row and column (fixed shapes): written where the tensor says
            keys.index_copy_(2, col, k.view(shape).transpose(1, 2))
            values.index_copy_(2, col, v.view(shape).transpose(1, 2))
            attended_keys, attended_values = keys, values
        else:
            keys[:n, :, col] = k.view(shape)[:, 0]
            values[:n, :, col] = v.view(shape)[:, 0]
            attended_keys, attended_values = keys[:n, :, self.start:col + 1], values[:n, :, self.start:col + 1]
        a = F.scaled_dot_product_attention(q, attended_keys, attended_values, attn_mask=mask, dropout_p=0.0,
                                           scale=attn.scaling, is_causal=False)
        a = a.reshape(n, -1, 1, attn.head_dim).transpose(1, 2).contiguous()
        x = attn.c_proj(a.reshape(n, 1, -1).contiguous()) + x
        return x + mlp(block, block.ln_2(x), fused_gelu)


def host_to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``tensor`` (on the host) on ``device``. On CUDA from pinned memory without waiting: a plain copy first waits
    for everything queued on the current stream (a decode step in flight: 13 ms at 32 callers on an H200); the
    pinned copy is the caching host allocator's, kept until the transfer is done."""
    if device.type == "cuda":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)


def indices(values: list[int], device: torch.device) -> torch.Tensor:
    """``values`` as a long tensor on ``device`` (:func:`host_to_device`): the rows a leave keeps, a group's rows,
    without waiting for the steps in flight (a tensor made on the device straight from a list would)."""
    return host_to_device(torch.tensor(values, dtype=torch.long), device)


def additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A boolean attention mask (True: attend) as the additive one SDPA makes of it (0 where True, -inf where False,
    in the query's dtype), made once per step for every layer: given the boolean mask, SDPA converts it again in
    each of the 30 layers (two kernels each on a card). The same numbers either way (under bf16 autocast SDPA casts
    the mask to bf16, where 0 and -inf are exact)."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(mask.logical_not(), float("-inf"))


def mlp(block: nn.Module, x: torch.Tensor, fused_gelu: bool = False) -> torch.Tensor:
    """A GPT-2 block's MLP of ``x``: Hugging Face's own (``block.mlp``), or with ``fused_gelu`` its tanh GELU as one
    kernel (``F.gelu(approximate="tanh")``) instead of ``NewGELUActivation``'s eight (a power, four products, two
    sums and a tanh, each a launch on a card: 210 of a decode step's launches over 30 layers). The two agree to
    within a unit in the last place (in fp32 about 1 % of the values differ, by at most 5e-7 for inputs up to 25 in
    size), so the exact paths (the CPU, and the eager step every recording is checked against) keep Hugging Face's;
    the recorded ones on a card (:mod:`.decode_graph`, :mod:`.prefill_graph`) take the fused one."""
    layer = block.mlp
    if not fused_gelu or not isinstance(layer.act, NewGELUActivation):
        return layer(x)
    return layer.dropout(layer.c_proj(F.gelu(layer.c_fc(x), approximate="tanh")))


def window_columns(t: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    """Columns ``[start, stop)`` of a key/value buffer (rows, heads, columns, head_dim) or of the mask (rows, columns)."""
    return t[:, :, start:stop] if t.dim() == 4 else t[:, start:stop]
