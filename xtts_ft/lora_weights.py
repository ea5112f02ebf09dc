"""LoRA adapter weights in a saved GPT state dict, merged into plain weights.

A ``training.trainable: lora`` checkpoint holds peft's keys (``...c_attn.base_layer.weight``,
``...c_attn.lora_A.default.weight``, ``...lora_B...``). Every reader of checkpoint weights (the
checkpoint store, so export, inference and the speech server) merges them here, so what leaves a
checkpoint has stock coqui's layout. Pure tensor arithmetic: it needs neither peft nor the model;
``xtts_ft/train/trainable.py`` puts the adapters on the model and checks this merge against peft's own.
"""

from __future__ import annotations

from typing import Mapping, Optional

import torch

from xtts_ft.errors import CheckpointError
from xtts_ft.json_types import JsonMapping

ADAPTER = "default"  # peft's adapter name; part of the state-dict keys
_BASE = ".base_layer."
_LORA_MARK = ".lora_"


def has_adapters(state: Mapping[str, object]) -> bool:
    return any(_LORA_MARK in k for k in state)


def merged_gpt_state(state: dict[str, torch.Tensor], training_config: Optional[JsonMapping],
                     source: str = "checkpoint") -> dict[str, torch.Tensor]:
    """A GPT state dict with plain weights: LoRA adapters (peft's keys) merged as peft merges them
    (``W + transpose(B @ A) * alpha / r`` for GPT-2's fan-in-fan-out ``Conv1D``); other states unchanged."""
    if not has_adapters(state):
        return state
    cfg = training_config or {}
    if "lora_rank" not in cfg or "lora_alpha" not in cfg:
        raise CheckpointError(f"{source}: holds LoRA adapters but no training.lora_rank/lora_alpha to merge them with")
    scaling = float(cfg["lora_alpha"]) / int(cfg["lora_rank"])
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        if _LORA_MARK in key:
            continue
        if _BASE not in key:
            out[key] = value
            continue
        owner, _, leaf = key.partition(_BASE)
        plain = f"{owner}.{leaf}"
        if leaf != "weight":
            out[plain] = value
            continue
        try:
            a, b = state[f"{owner}.lora_A.{ADAPTER}.weight"], state[f"{owner}.lora_B.{ADAPTER}.weight"]
        except KeyError:
            raise CheckpointError(f"{source}: {key} has no LoRA A/B weights beside it; the checkpoint is incomplete") from None
        out[plain] = value + (b @ a).T * scaling
    return out
