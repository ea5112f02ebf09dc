"""Grow the GPT text embedding and text head to a larger vocabulary before base weights load.

Old rows stay bit-identical (token ids of the base vocabulary never move: new tokens are
appended). New rows are drawn from the statistics of the trained rows (per-dimension mean and
standard deviation), not unit-variance noise, so the first loss is not inflated.
"""

from __future__ import annotations

from typing import Optional

import torch

TEXT_ROW_KEYS = ("text_embedding.weight", "text_head.weight", "text_head.bias")


def _grow(rows: torch.Tensor, new_size: int, generator: Optional[torch.Generator]) -> torch.Tensor:
    old_size = rows.shape[0]
    if new_size < old_size:
        raise ValueError(f"cannot shrink text rows from {old_size} to {new_size}")
    if new_size == old_size:
        return rows.clone()
    trained = rows.float()
    mean = trained.mean(dim=0, keepdim=True)
    std = trained.std(dim=0, keepdim=True) if old_size > 1 else torch.zeros_like(mean)
    noise = torch.randn((new_size - old_size, *rows.shape[1:]), generator=generator, dtype=torch.float32)
    new_rows = (mean + std * noise).to(rows.dtype)
    return torch.cat([rows, new_rows], dim=0)


def resize_text_rows(
    state_dict: dict[str, torch.Tensor], new_size: int, *, prefix: str = "gpt.", seed: int = 0
) -> dict[str, torch.Tensor]:
    """Return a copy of ``state_dict`` whose text rows have ``new_size`` entries."""
    generator = torch.Generator().manual_seed(seed)
    out = dict(state_dict)
    for key in TEXT_ROW_KEYS:
        full = prefix + key
        if full in out:
            out[full] = _grow(out[full], new_size, generator)
    return out
