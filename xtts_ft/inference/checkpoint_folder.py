"""A training checkpoint folder as synthesis reads it: which checkpoint a path names, the base model it was
trained from, its GPT weights and the language and text settings it was trained with.

Shared by loading a model (:mod:`xtts_ft.inference.loading`: evaluation and the speech server), export and the
commands above them, so that none of those imports another for these reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional, TypedDict

import torch
import yaml

from xtts_ft.base_model import BaseModelFiles, resolve_base_model
from xtts_ft.checkpoint_store import CheckpointRecord, CheckpointStore
from xtts_ft.config import BaseModelConfig, RunConfig
from xtts_ft.errors import CheckpointError
from xtts_ft.languages import canonical_language
from xtts_ft.layout import META_FILE, STATE_FILE, CheckpointLayout
from xtts_ft.text_settings import TextSettings

if TYPE_CHECKING:
    from xtts_ft.json_types import JsonObject

TRAINING_STATE = STATE_FILE  # the name callers of this module know it by
INFERENCE_PREFIXES = ("gpt_inference.", "gpt.wte.")  # copies made by GPT.init_gpt_for_inference


def gpt_relative_state(state: object, source: str = "checkpoint") -> dict[str, torch.Tensor]:
    """GPT weights keyed relative to ``xtts.gpt``, whichever prefix style they were saved with.

    Accepts keys relative to ``xtts.gpt`` (``text_embedding.weight``), to ``xtts``
    (``gpt.text_embedding.weight``), to coqui's trainer (``xtts.gpt.``), with or without a
    DistributedDataParallel ``module.`` prefix. Inference-only copies are dropped.
    """
    if not isinstance(state, dict) or not state:
        raise CheckpointError(f"{source}: holds no GPT state dict")
    for outer in ("module.", ""):
        for prefix in ("xtts.gpt.", "gpt.", ""):
            full = outer + prefix
            if full + "text_embedding.weight" in state:
                out = {k[len(full) :]: v for k, v in state.items() if k.startswith(full)}
                return {k: v for k, v in out.items() if not k.startswith(INFERENCE_PREFIXES)}
    raise CheckpointError(f"{source}: no GPT weights found (no 'text_embedding.weight' key); is it an XTTS GPT checkpoint?")


def load_checkpoint_gpt_state(ckpt_dir: Path) -> dict[str, torch.Tensor]:
    """The GPT weights of a training checkpoint folder (verified by the store when its record has a sha256;
    a coqui-trainer-style ``{"model": ...}`` folder is accepted too), relative to the GPT module."""
    return gpt_relative_state(CheckpointStore.load_gpt_weights(Path(ckpt_dir)), str(CheckpointLayout(ckpt_dir).state))


class CheckpointSettings(TypedDict):
    """What a checkpoint folder records about how it was trained (:func:`checkpoint_settings`)."""

    language: str
    text: TextSettings
    step: Optional[int]  # None: neither the record nor the folder's name gives one
    checkpoint_meta: JsonObject  # the checkpoint record as JSON; empty without a record
    vocab_fingerprint: Optional[str]


def _section(cfg: JsonObject, name: str) -> JsonObject:
    """One section of a written config.yaml; empty when it is missing or not a mapping."""
    value = cfg.get(name)
    return value if isinstance(value, dict) else {}


def checkpoint_settings(ckpt_dir: Path) -> CheckpointSettings:
    """Language, text front-end settings and step recorded in a checkpoint folder (tolerant of gaps)."""
    files = CheckpointLayout(ckpt_dir)
    record = CheckpointRecord.find(Path(ckpt_dir))
    cfg: JsonObject = {}
    if files.config.is_file():
        try:
            cfg = yaml.safe_load(files.config.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as exc:
            raise CheckpointError(f"{files.config}: not valid YAML ({exc})") from None
    return {
        "language": canonical_language(_section(cfg, "run").get("language", RunConfig.language)),
        "text": TextSettings.from_sections(_section(cfg, "text"), _section(cfg, "tokenizer")),
        "step": record.step if record is not None else files.step,
        "checkpoint_meta": record.to_json() if record is not None else {},
        "vocab_fingerprint": record.vocab_fingerprint if record is not None else None,
    }


def refuse_folder_of_checkpoints(ckpt_dir: Path) -> None:
    """``--checkpoint RUN/checkpoints`` (or the run folder): name the step folders it holds, the newest as the example."""
    ckpt_dir = Path(ckpt_dir)
    if CheckpointStore.is_checkpoint(ckpt_dir) or CheckpointStore.holds_weights(ckpt_dir):
        return
    for store in (CheckpointStore(ckpt_dir), CheckpointStore.of_run(ckpt_dir)):
        steps = list(store.step_folders().values())
        if steps:
            shown = ", ".join(p.name for p in steps[-5:])
            more = f"{len(steps) - 5} more, " if len(steps) > 5 else ""
            raise CheckpointError(f"--checkpoint {ckpt_dir}: holds checkpoints, it is not one ({more}{shown}); pass "
                                  f"one of them, e.g. --checkpoint {steps[-1]}")


def base_for_checkpoint(ckpt_dir: Path, source: Optional[str] = None) -> BaseModelFiles:
    """The base model a checkpoint was trained from (its record), unless ``source`` names another."""
    if not Path(ckpt_dir).is_dir():
        raise CheckpointError(f"--checkpoint {ckpt_dir}: folder not found")
    refuse_folder_of_checkpoints(ckpt_dir)
    if source is None:
        record = CheckpointRecord.find(Path(ckpt_dir))
        if record is None:
            raise CheckpointError(f"{ckpt_dir}: no {META_FILE}; pass --base-model with the base model folder or "
                                  f"repo id")
        source = record.base_model
        if not source:
            raise CheckpointError(f"{ckpt_dir}: its checkpoint record does not name its base model; pass --base-model")
    return resolve_base_model(BaseModelConfig(source=str(source)))
