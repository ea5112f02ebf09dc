"""Which GPT weights a run trains: ``training.trainable`` = all / freeze / lora.

Fine-tuning every GPT weight on one new language makes the model forget the base languages
(English turns to gibberish). Two common cures, both kept here in one place:

- ``freeze``: the first ``training.frozen_blocks`` GPT-2 blocks keep the base weights
  (``requires_grad=False``), and so do the base vocabulary's rows of the text embedding and the
  text head. The new (Amharic) token rows and everything else train.
- ``lora``: every GPT weight is frozen; ``peft`` adds low-rank adapters to the GPT-2 blocks'
  ``c_attn`` / ``c_proj`` / ``c_fc`` (transformers ``Conv1D``, hence ``fan_in_fan_out``). The
  new token rows of the text embedding and the text and mel heads (whole) train as well: a new
  language needs new rows and its own output distribution, which a low-rank update of the
  blocks cannot give.

Frozen *rows* of a tensor that otherwise trains cannot be switched off with ``requires_grad``.
:class:`KeptRows` does two things for them: a gradient hook zeroes their gradient (so clipping
and the grad norm see only what trains), and an optimizer step pre/post hook copies them back
after every step, because AdamW's decoupled weight decay (``text_head.weight`` is a decayed
matrix) and any Adam moment left from an earlier state would still move them. They stay
bit-identical to the base model.

A LoRA run's GPT state dict (checkpoints, the rollback snapshot, resume) holds peft's keys
(``...c_attn.base_layer.weight``, ``...c_attn.lora_A.default.weight``): the in-memory model and
its checkpoints have the same layout, so resume restores the adapters exactly.
:func:`merged_gpt_state` turns such a state into plain GPT weights (what export and inference
read), with peft's own merge arithmetic; :func:`merge_adapters` does it in memory through
peft's layers.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch
import torch.nn as nn

from xtts_ft.config import TrainingConfig
from xtts_ft.errors import CheckpointError, ConfigError
from xtts_ft.json_types import JsonMapping
from xtts_ft.lora_weights import _LORA_MARK, ADAPTER, has_adapters, merged_gpt_state  # noqa: F401 - merged_gpt_state: re-exported
from xtts_ft.train.schedule import NEW_TOKEN_ROW_PARAMS

log = logging.getLogger(__name__)

LORA_HEADS = ("text_head", "mel_head")  # trained whole under lora


class KeptRows:
    """Rows ``[:base_vocab_size]`` of the text-row tensors that stay exactly as they are while the rest trains."""

    def __init__(self, gpt: nn.Module, base_vocab_size: int, names: tuple[str, ...]):
        params = dict(gpt.named_parameters())
        self.base = int(base_vocab_size)
        self.params = {n: params[n] for n in names if n in params and params[n].requires_grad}
        self._saved: list[torch.Tensor] = []
        self._handles: list[torch.utils.hooks.RemovableHandle] = []
        for param in self.params.values():
            self._handles.append(param.register_hook(self._mask))

    def _mask(self, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.clone()
        grad[: self.base] = 0
        return grad

    def attach(self, optimizer: torch.optim.Optimizer) -> None:
        """Copy the kept rows back after every ``optimizer.step()`` (weight decay would move them)."""
        if not self.params:
            return
        self._handles.append(optimizer.register_step_pre_hook(lambda *_: self._save()))
        self._handles.append(optimizer.register_step_post_hook(lambda *_: self._restore()))

    @torch.no_grad()
    def _save(self) -> None:
        self._saved = [p[: self.base].detach().clone() for p in self.params.values()]

    @torch.no_grad()
    def _restore(self) -> None:
        for param, saved in zip(self.params.values(), self._saved):
            param[: self.base].copy_(saved)
        self._saved = []

    @property
    def count(self) -> int:
        return sum(p[: self.base].numel() for p in self.params.values())


@dataclass
class TrainableSetup:
    """What :func:`apply_trainable` did to the GPT; ``attach`` it to the optimizer built afterwards."""

    mode: str
    kept_rows: Optional[KeptRows] = None
    frozen_blocks: int = 0
    adapters: list[str] = field(default_factory=list)  # module names that got LoRA adapters

    def attach(self, optimizer: torch.optim.Optimizer) -> None:
        if self.kept_rows is not None:
            self.kept_rows.attach(optimizer)

    @property
    def kept(self) -> int:
        """Weights of trainable tensors that stay as they are (the base rows): not counted as trained anywhere."""
        return self.kept_rows.count if self.kept_rows is not None else 0


def _blocks(gpt: nn.Module) -> nn.ModuleList:
    return gpt.gpt.h  # coqui's GPT wraps a transformers GPT2Model


def apply_trainable(gpt: nn.Module, tcfg: TrainingConfig, base_vocab_size: int, *, seed: int = 0) -> TrainableSetup:
    """Set which GPT weights train (``requires_grad``), inject LoRA adapters for ``lora``.

    Call before the optimizer is built (it takes the tensors that require gradients) and before a
    checkpoint is loaded (a LoRA checkpoint has the adapters' keys). ``seed`` makes the adapters'
    random initialisation the same in every run without touching the global random streams.
    """
    mode = tcfg.trainable
    if mode == "all":
        return TrainableSetup(mode)
    gpt.requires_grad_(True)
    rows = NEW_TOKEN_ROW_PARAMS if mode == "freeze" else NEW_TOKEN_ROW_PARAMS[:1]
    if mode == "freeze":
        blocks = _blocks(gpt)
        if tcfg.frozen_blocks > len(blocks):
            raise ConfigError(f"training.frozen_blocks: {tcfg.frozen_blocks} is more than the GPT's {len(blocks)} "
                              f"blocks; set at most {len(blocks)}")
        for block in blocks[: tcfg.frozen_blocks]:
            block.requires_grad_(False)
        setup = TrainableSetup(mode, frozen_blocks=tcfg.frozen_blocks)
    elif mode == "lora":
        from peft import LoraConfig, inject_adapter_in_model

        gpt.requires_grad_(False)
        config = LoraConfig(r=tcfg.lora_rank, lora_alpha=tcfg.lora_alpha, lora_dropout=tcfg.lora_dropout,
                            target_modules=list(tcfg.lora_targets), fan_in_fan_out=True, bias="none")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            inject_adapter_in_model(config, gpt.gpt, adapter_name=ADAPTER)  # marks only the adapters trainable
        for name in ("text_embedding", *LORA_HEADS):
            getattr(gpt, name).requires_grad_(True)
        adapters = sorted({n.rsplit(".lora_", 1)[0] for n, _ in gpt.named_parameters() if _LORA_MARK in n})
        setup = TrainableSetup(mode, adapters=adapters)
    else:
        raise ConfigError(f"training.trainable: {mode!r} is not one of all, freeze, lora")
    setup.kept_rows = KeptRows(gpt, base_vocab_size, rows)
    named = list(gpt.named_parameters())
    trained = sum(p.numel() for _, p in named if p.requires_grad) - setup.kept
    total = sum(p.numel() for n, p in named if _LORA_MARK not in n)
    detail = (f"{len(setup.adapters)} LoRA adapters of rank {tcfg.lora_rank}" if mode == "lora"
              else f"GPT blocks 0-{tcfg.frozen_blocks - 1} frozen" if tcfg.frozen_blocks else "no block frozen")
    log.info("training.trainable %s: %s weights train (the GPT has %s; %s); the base vocabulary's %d text rows "
             "stay as they are", mode, f"{trained:,}", f"{total:,}", detail, base_vocab_size)
    return setup


@torch.no_grad()
def merge_adapters(gpt: nn.Module) -> int:
    """Merge LoRA adapters into the base weights in place (peft's ``merge``) and put the plain modules
    back, so the GPT has stock coqui's layout again. Returns how many adapters were merged."""
    from peft.tuners.lora import LoraLayer

    merged = 0
    for name, module in list(gpt.named_modules()):
        if isinstance(module, LoraLayer):
            module.merge(adapter_names=[ADAPTER])
            parent_name, _, child = name.rpartition(".")
            setattr(gpt.get_submodule(parent_name) if parent_name else gpt, child, module.get_base_layer())
            merged += 1
    return merged


# settings that change the GPT's tensors (or, for alpha, what the adapters mean): a resume keeps them
_STRUCTURAL = {"lora": ("lora_rank", "lora_alpha", "lora_targets")}


def check_resume_trainable(saved: Optional[JsonMapping], tcfg: TrainingConfig, ckpt_dir: Path) -> None:
    """Refuse a resume whose ``training.trainable`` (or LoRA shape) differs from the checkpoint's, naming the key.

    Checkpoints written before the option existed trained everything (``all``)."""
    saved = saved or {}
    before = saved.get("trainable", "all")
    if before != tcfg.trainable:
        raise CheckpointError(
            f"{ckpt_dir}: was trained with training.trainable: {before}, the config says {tcfg.trainable}; set "
            f"training.trainable: {before} to continue this run, or start a new run dir for {tcfg.trainable}")
    for key in _STRUCTURAL.get(tcfg.trainable, ()):
        if key in saved and saved[key] != getattr(tcfg, key):
            raise CheckpointError(
                f"{ckpt_dir}: was trained with training.{key}: {saved[key]}, the config says {getattr(tcfg, key)}; "
                f"set it back to {saved[key]} to continue this run, or start a new run dir")
