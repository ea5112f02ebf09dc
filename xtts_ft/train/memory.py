"""GPU memory: ``training.batch_size: auto`` and ``training.gradient_checkpointing``.

``find_batch_size`` tries powers of two on the longest training clips (one forward/backward each)
and keeps the largest that fits; on CPU there is nothing to probe and it uses 4.

``enable_gradient_checkpointing`` switches on Hugging Face GPT-2's block checkpointing in the XTTS
GPT. transformers' switch also hooks the model's input embedding (``GPT2Model.wte``), which XTTS
deletes because it feeds embeddings directly; the embedding is aliased for the duration of the call
(as coqui's own inference setup does), the hook is removed again (the GPT's inputs come from
trainable embeddings, so they require grad anyway) and the alias is dropped.
"""

from __future__ import annotations

import logging
from typing import Callable

import torch
import torch.nn as nn

from xtts_ft.errors import TrainingStopped

log = logging.getLogger(__name__)


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


def find_batch_size(try_batch: Callable[[int], None], device: torch.device, limit: int) -> int:
    """``training.batch_size: auto``: the largest power of two (<= limit) whose step fits in GPU memory."""
    if device.type != "cuda":
        log.info("batch_size auto: 4 on %s (memory probing is for GPUs)", device)
        return min(4, limit)
    best, size = 0, 1
    while size <= limit:
        try:
            try_batch(size)
        except torch.cuda.OutOfMemoryError:
            break
        finally:
            torch.cuda.empty_cache()
        best, size = size, size * 2
    if best == 0:
        raise TrainingStopped(
            "batch_size auto: even one clip does not fit in GPU memory; shorten dataset.max_duration_s"
        )
    log.info("batch_size auto: %d (largest power of two that fits the longest clips)", best)
    return best
