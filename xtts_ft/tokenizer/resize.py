"""Grow the GPT text embedding and text head to a larger vocabulary before base weights load.

Old rows stay bit-identical (token ids of the base vocabulary never move: new tokens are
appended). New rows of ``text_embedding.weight`` and ``text_head.weight`` are drawn from a
diagonal Gaussian with the per-dimension mean and standard deviation of the trained rows, so a
new token looks like a typical old one to the layers that read it. coqui's own resize path uses
unit-variance noise instead, which is tens of times larger than trained XTTS rows and inflates
the first losses (tests/tokenizer/test_tokenizer_resize.py measures this on a tiny model).

``text_head.bias``: every new entry is the mean of the trained biases, without noise. A bias is
one number per token, the token's prior log-odds; the head weights already break the symmetry
between new tokens, and noise would only hand some never-seen tokens a random head start over
the others. The mean gives each new token an average prior; training moves it from there.
"""

from __future__ import annotations

import torch

TEXT_ROW_KEYS = ("text_embedding.weight", "text_head.weight", "text_head.bias")


def _grow(rows: torch.Tensor, new_size: int, generator: torch.Generator, *, noise: bool) -> torch.Tensor:
    old_size = rows.shape[0]
    if new_size < old_size:
        raise ValueError(f"cannot shrink text rows from {old_size} to {new_size}")
    if new_size == old_size:
        return rows.clone()
    trained = rows.detach().float()
    mean = trained.mean(dim=0, keepdim=True)
    shape = (new_size - old_size, *rows.shape[1:])
    if noise and old_size > 1:
        std = trained.std(dim=0, keepdim=True)
        sample = torch.randn(shape, generator=generator, dtype=torch.float32).to(rows.device)
        new_rows = mean + std * sample
    else:
        new_rows = mean.expand(shape)
    return torch.cat([rows.detach(), new_rows.to(rows.dtype)], dim=0)


def resize_text_rows(
    state_dict: dict[str, torch.Tensor], new_size: int, *, prefix: str = "gpt.", seed: int = 0
) -> dict[str, torch.Tensor]:
    """Return a copy of ``state_dict`` whose text rows have ``new_size`` entries (input unchanged).

    Rows ``[0, old_size)`` are bit-identical to the input; rows ``[old_size, new_size)`` are new
    (see the module docstring). ``seed`` makes the new rows reproducible. Keys that are absent
    are skipped; a ``new_size`` smaller than the current size raises ValueError.
    """
    generator = torch.Generator().manual_seed(seed)
    out = dict(state_dict)
    for key in TEXT_ROW_KEYS:
        full = prefix + key
        if full in out:
            out[full] = _grow(out[full], new_size, generator, noise=not key.endswith("bias"))
    return out
