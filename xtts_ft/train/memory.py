"""GPU memory: ``batch_size: auto``, gradient checkpointing, and the frozen modules kept off the GPU.

``training.batch_size: auto`` (:func:`find_batch_size`): real training steps (forward + backward)
on a worst-case batch (:func:`worst_case_batch`: every row padded to the dataset's longest text
*and* its longest audio, so no real batch of that size is larger), doubling the size until one
runs out of memory, then a binary search between the last size that fit and the first that did
not. During the search a placeholder the size of AdamW's state (two fp32 copies of the trainable
weights, :func:`optimizer_state_bytes`) is held on the GPU, since the optimizer does not exist yet.
The run uses ``AUTO_BATCH_MARGIN`` (90 %) of the largest size that fit, rounded down (at least 1;
the whole size when nothing ran out of memory up to the limit): allocator fragmentation and the
optimizer's temporaries are not in the probe, and a batch that still runs out of memory mid-run is
split (``oom.py``). The result is printed with the probe's peak memory. On CPU there is nothing to
probe and the size is 4. :func:`plan_accumulation` then sets ``grad_accum_steps`` so batch x
accumulation x GPUs reaches ``training.effective_batch_size``.

``enable_gradient_checkpointing`` switches on Hugging Face GPT-2's block checkpointing in the XTTS
GPT. transformers' switch also hooks the model's input embedding (``GPT2Model.wte``), which XTTS
deletes because it feeds embeddings directly; the embedding is aliased for the duration of the call
(as coqui's own inference setup does), the hook is removed again (the GPT's inputs come from
trainable embeddings, so they require grad anyway) and the alias is dropped.

``training.offload_frozen`` (:func:`offload_plan`, :func:`place_modules`, :func:`modules_on`): the
HiFiGAN decoder (and the speaker encoder inside it) never runs in a training step, and the DVAE
does not either once its codes are cached; they stay on the CPU and move to the device only
around the evaluation hook (synthesis needs them). The mel extractors are tiny and stay.

Out of memory (:func:`is_out_of_memory`) is more than ``torch.OutOfMemoryError``: a library that
cannot allocate its workspace raises a plain RuntimeError, e.g. cuDNN's "unable to find an engine"
(no algorithm fits the free memory), cuFFT's ``CUFFT_ALLOC_FAILED`` (the mel STFTs) and cuBLAS's
``CUBLAS_STATUS_ALLOC_FAILED`` (handle or workspace). The batch-size probe (which runs to the
limit on purpose) and the out-of-memory split (``oom.py``) both ask this one classifier; any other
RuntimeError is a bug and is raised.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import math
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional, Sequence

import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

from xtts_ft.errors import TrainingStopped
from xtts_ft.train.data import Batch, BatchInputs, Clip, ClipDataset, ClipItem, ModelInputs, collate
from xtts_ft.train.precision import Autocast
from xtts_ft.train.sampler import ItemKey

log = logging.getLogger(__name__)

AUTO_BATCH_MARGIN = 0.9  # share of the largest fitting batch size that a run uses
MAX_AUTO_BATCH = 64
CPU_AUTO_BATCH = 4
OFFLOADABLE = ("xtts.hifigan_decoder", "dvae")  # frozen modules a training step never runs (DVAE: with cached codes)


def enable_gradient_checkpointing(gpt: nn.Module) -> None:
    """Recompute the activations of every GPT-2 block of an XTTS ``gpt`` in backward."""
    hf = gpt.gpt
    aliased = "wte" not in hf._modules
    if aliased:
        hf.wte = gpt.mel_embedding
    try:
        kwargs = {"use_reentrant": False}
        if hasattr(hf, "activation_checkpointing_enable"):  # transformers >= 5
            hf.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    finally:
        if hasattr(hf, "disable_input_require_grads"):
            hf.disable_input_require_grads()
        if aliased:
            del hf.wte
    if not getattr(hf, "gradient_checkpointing", False):
        log.warning("training.gradient_checkpointing: this transformers version did not enable it; training without")
        return
    log.info("gradient checkpointing on: GPT block activations are recomputed in backward")


# ---------------------------------------------------------------------- batch_size: auto
@dataclass
class BatchChoice:
    """What :func:`find_batch_size` found; ``peak_bytes``/``total_bytes`` are None without a GPU."""

    size: int  # the batch size the run uses
    largest_fit: int  # the largest size whose probe step fit
    first_oom: Optional[int]  # the smallest size that ran out of memory (None: none did up to the limit)
    peak_bytes: Optional[int] = None  # peak memory of the probe step at ``largest_fit``
    total_bytes: Optional[int] = None
    tried: list[tuple[int, bool]] = field(default_factory=list)  # (size, fit) in the order tried

    def describe(self) -> str:
        if self.peak_bytes is None:
            return f"batch_size auto: {self.size} (largest fitting {self.largest_fit}; no GPU memory to measure)"
        oom = f", {self.first_oom} ran out of memory" if self.first_oom else ", no size up to the limit ran out"
        return (f"batch_size auto: {self.size} (largest fitting {self.largest_fit}{oom}; peak "
                f"{self.peak_bytes / 2**30:.2f} GiB of {(self.total_bytes or 0) / 2**30:.2f} GiB at the longest clip)")


# Messages of RuntimeErrors that mean "no memory for this" although they are not torch.OutOfMemoryError
OUT_OF_MEMORY_MARKERS = (
    "CUDA error: out of memory",  # cudaErrorMemoryAllocation outside the caching allocator (e.g. a library)
    "HIP error: out of memory",
    "unable to find an engine",  # cuDNN v8/v9 frontend: no engine whose workspace fits
    "CUDNN_STATUS_ALLOC_FAILED",
    "CUFFT_ALLOC_FAILED",
    "CUBLAS_STATUS_ALLOC_FAILED",
    "CUSOLVER_STATUS_ALLOC_FAILED",
)


def is_out_of_memory(exc: BaseException) -> bool:
    """True for torch.OutOfMemoryError and the RuntimeErrors of libraries that could not allocate a workspace."""
    if isinstance(exc, torch.OutOfMemoryError):  # torch.cuda.OutOfMemoryError is the same class (torch >= 2.5)
        return True
    if not isinstance(exc, RuntimeError):
        return False
    message = str(exc)
    return any(marker.lower() in message.lower() for marker in OUT_OF_MEMORY_MARKERS)


def release_memory(device: torch.device) -> None:
    """Hand cached blocks back after an out-of-memory error (call it outside the ``except`` block)."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _fits(try_batch: Callable[[int], None], n: int, device: torch.device) -> tuple[bool, Optional[int]]:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    ok = True
    try:
        try_batch(n)
    except RuntimeError as exc:  # torch.OutOfMemoryError is one
        if not is_out_of_memory(exc):
            raise
        ok = False
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    if not ok:
        release_memory(device)
    return ok, peak


def _will_probe(probe: Optional[bool], device: torch.device) -> bool:
    return probe if probe is not None else device.type == "cuda"


def find_batch_size(try_batch: Callable[[int], None], device: torch.device, limit: int, *,
                    probe: Optional[bool] = None, margin: float = AUTO_BATCH_MARGIN) -> BatchChoice:
    """The batch size for ``training.batch_size: auto`` (see the module doc).

    ``try_batch(n)`` runs one real step on ``n`` clips and raises an out-of-memory error
    (:func:`is_out_of_memory`) when it does not fit. ``probe`` None: probe on a GPU only; True forces
    probing (tests inject the error).
    """
    limit = max(1, int(limit))
    if not _will_probe(probe, device):
        size = min(CPU_AUTO_BATCH, limit)
        log.info("batch_size auto: %d on %s (memory probing is for GPUs)", size, device)
        return BatchChoice(size=size, largest_fit=size, first_oom=None)
    tried: list[tuple[int, bool]] = []
    peaks: dict[int, Optional[int]] = {}

    def attempt(n: int) -> bool:
        ok, peak = _fits(try_batch, n, device)
        tried.append((n, ok))
        if ok:
            peaks[n] = peak
        return ok

    good, bad, n = 0, None, 1
    while bad is None:  # doubling: 1, 2, 4, ... (the limit itself last)
        if attempt(n):
            good = n
            if n >= limit:
                break
            n = min(2 * n, limit)
        else:
            bad = n
    if good == 0:
        raise TrainingStopped("batch_size auto: even one clip of the longest length does not fit in GPU memory; "
                              "enable training.gradient_checkpointing or training.offload_frozen, or lower "
                              "dataset.max_duration_s")
    while bad is not None and bad - good > 1:  # binary search between the last fit and the first failure
        mid = (good + bad) // 2
        if attempt(mid):
            good = mid
        else:
            bad = mid
    size = good if bad is None else max(1, math.floor(good * margin))
    total = torch.cuda.get_device_properties(device).total_memory if device.type == "cuda" else None
    choice = BatchChoice(size=size, largest_fit=good, first_oom=bad, peak_bytes=peaks.get(good), total_bytes=total,
                         tried=tried)
    log.info("%s", choice.describe())
    return choice


def plan_accumulation(batch_size: int, effective: Optional[int], world_size: int, grad_accum_steps: int, *,
                      lower_batch: bool) -> tuple[int, int]:
    """(batch size, accumulation steps) so batch x accumulation x world_size reaches ``effective``.

    ``effective`` None keeps ``grad_accum_steps``. With ``lower_batch`` (batch_size auto) the batch is
    lowered to the smallest size that needs the same accumulation: 32 clips with a batch of 10 that
    fits -> 4 steps -> batch 8 (32 clips, not 40).
    """
    if effective is None:
        return batch_size, grad_accum_steps
    accum = max(1, math.ceil(effective / (batch_size * world_size)))
    if lower_batch:
        batch_size = max(1, min(batch_size, math.ceil(effective / (accum * world_size))))
    return batch_size, accum


def auto_batch_limit(num_clips: int, world_size: int, effective: Optional[int]) -> int:
    """The largest batch worth probing: each rank's share of the clips, the effective batch, MAX_AUTO_BATCH."""
    limit = min(MAX_AUTO_BATCH, -(-num_clips // world_size))
    if effective is not None:
        limit = min(limit, -(-effective // world_size))
    return max(1, limit)


def worst_case_batch(dataset: ClipDataset, text_lengths: Sequence[int], audio_lengths: Sequence[int], n: int,
                     rank: int = 0) -> Batch:
    """A collated batch of ``n`` rows, each the longest audio clip with the longest text's tokens.

    Every real batch of ``n`` clips is padded to at most this text and audio length.
    """

    longest_audio = max(range(len(audio_lengths)), key=audio_lengths.__getitem__)
    longest_text = max(range(len(text_lengths)), key=text_lengths.__getitem__)
    text = dataset[ItemKey(longest_text, 0, 0, 0, rank)]["text"]
    items: list[ClipItem] = []
    for slot in range(n):
        item = dataset[ItemKey(longest_audio, 0, 0, slot, rank)]
        items.append({**item, "text": text})
    return collate(items)


def probe_step(model: nn.Module, inputs: ModelInputs, autocast: Autocast, device: torch.device) -> None:
    """One forward and backward of ``inputs``; leaves no gradient and no change to any random stream."""
    gpt = model.xtts.gpt
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        gpt.zero_grad(set_to_none=True)
        try:
            args = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
            with autocast():
                loss = model(**args)["loss"]
            loss.backward()
        finally:
            gpt.zero_grad(set_to_none=True)


def probe_batch_size(model: nn.Module, dataset: ClipDataset, clips: Sequence[Clip], model_inputs: BatchInputs,
                     autocast: Autocast,
                     device: torch.device, *, rank: int, world_size: int, effective: Optional[int],
                     probe: Optional[bool] = None) -> BatchChoice:
    """``batch_size: auto`` for the training loop: :func:`find_batch_size` on worst-case batches of ``clips``."""
    texts, audio = [len(c.tokens) for c in clips], [c.num_samples for c in clips]

    def try_batch(n: int) -> None:
        batch = worst_case_batch(dataset, texts, audio, n, rank)
        probe_step(model, model_inputs(batch, train=True), autocast, device)

    limit = auto_batch_limit(len(clips), world_size, effective)
    if _will_probe(probe, device):
        log.info("batch_size auto: probing up to %d clips, each padded to the longest text (%d tokens) and audio "
                 "(%d samples)", limit, max(texts), max(audio))
    eager = getattr(model, "eager_blocks", contextlib.nullcontext)  # training.compile: the probe runs uncompiled
    with reserve_memory(probe_reserve_bytes(list(model.xtts.gpt.parameters()), world_size), device), eager():
        return find_batch_size(try_batch, device, limit, probe=probe)


def optimizer_state_bytes(params: Sequence[torch.Tensor]) -> int:
    """AdamW keeps two fp32 tensors (exp_avg, exp_avg_sq) per trainable weight."""
    return sum(2 * p.numel() * 4 for p in params if p.requires_grad)


def ddp_bucket_bytes(params: Sequence[torch.Tensor], world_size: int) -> int:
    """DDP's all-reduce buckets: a copy of every trainable gradient (``gradient_as_bucket_view=False``)."""
    if world_size <= 1:
        return 0
    return sum(p.numel() * p.element_size() for p in params if p.requires_grad)


def probe_reserve_bytes(params: Sequence[torch.Tensor], world_size: int) -> int:
    """Memory the run will hold that the probe's steps do not: AdamW state, plus DDP buckets when distributed."""
    return optimizer_state_bytes(params) + ddp_bucket_bytes(params, world_size)


@contextlib.contextmanager
def reserve_memory(nbytes: int, device: torch.device) -> Iterator[None]:
    """Hold ``nbytes`` on a GPU for the duration (the optimizer state the probe must leave room for)."""
    block, fits = None, True
    if device.type == "cuda" and nbytes > 0:
        try:
            block = torch.empty(int(nbytes), dtype=torch.uint8, device=device)
        except RuntimeError as exc:
            if not is_out_of_memory(exc):
                raise
            fits = False
    if not fits:
        release_memory(device)
        raise TrainingStopped(f"batch_size auto: the model plus AdamW's state (and DDP's gradient buckets with several "
                              f"GPUs; {nbytes / 2**30:.1f} GiB) alone do not fit in GPU memory; set "
                              f"training.offload_frozen: true or use a larger card")
    try:
        yield
    finally:
        del block
        release_memory(device)


# ---------------------------------------------------------------------- offload_frozen
def offload_plan(enabled: bool, codes_cached: bool) -> list[str]:
    """Names of the frozen submodules that stay on the CPU during training."""
    if not enabled:
        return []
    if codes_cached:
        return list(OFFLOADABLE)
    log.info("training.offload_frozen: the DVAE stays on the device (training.cache_dvae_codes is off, so every "
             "step computes codes); only the HiFiGAN decoder is offloaded")
    return [name for name in OFFLOADABLE if name != "dvae"]


def place_modules(model: nn.Module, names: Sequence[str], device: torch.device) -> None:
    """Move the named submodules of ``model`` (and nothing else) to ``device``."""
    for name in names:
        model.get_submodule(name).to(device)


@contextlib.contextmanager
def modules_on(model: nn.Module, names: Sequence[str], device: torch.device) -> Iterator[None]:
    """The offloaded modules on ``device`` for the duration (evaluation), back on the CPU afterwards."""
    if not names:
        yield
        return
    try:
        place_modules(model, names, device)
        yield
    finally:
        place_modules(model, names, torch.device("cpu"))
        release_memory(device)


def offloaded_tensor_names(model: nn.Module, names: Sequence[str]) -> list[str]:
    """Parameter and buffer names under the offloaded modules."""
    prefixes = tuple(f"{n}." for n in names)
    return [k for k, _ in [*model.named_parameters(), *model.named_buffers()] if k.startswith(prefixes)]


def ddp_ignore(model: nn.Module, names: Sequence[str]) -> None:
    """Tell DistributedDataParallel to leave the offloaded modules alone (it wants one device type)."""
    if names:

        DDP._set_params_and_buffers_to_ignore_for_model(model, offloaded_tensor_names(model, names))
