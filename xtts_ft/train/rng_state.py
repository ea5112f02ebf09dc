"""Every random generator training draws from, captured as plain lists (weights_only-safe) and restored.

A checkpoint keeps one snapshot per rank (``TrainingState.rng``), so a resumed run draws the same
numbers an uninterrupted one would have.
"""

from __future__ import annotations

import random

import numpy as np
import torch

from xtts_ft.training_state import RngState


def capture_rng(device: torch.device) -> RngState:
    version, mt, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    out: RngState = {
        "python": [version, list(mt), gauss],
        "numpy": [str(name), [int(k) for k in keys], int(pos), int(has_gauss), float(cached)],
        "torch": torch.get_rng_state(),
    }
    if device.type == "cuda":
        out["cuda"] = torch.cuda.get_rng_state(device)
    return out


def restore_rng(state: RngState, device: torch.device) -> None:
    version, mt, gauss = state["python"]
    random.setstate((version, tuple(mt), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)
