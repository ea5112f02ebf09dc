"""Export a fine-tuned model as a folder that stock coqui-tts loads unchanged.

The folder (file names: :mod:`xtts_ft.model_folder`) holds ``model.pth`` (``{"model": state}``:
the base Xtts weights with the fine-tuned GPT in place of ``gpt.*``, text rows at the extended
size; no optimizer), ``config.json`` (the base config with the new text-token counts and the new
language), the extended ``vocab.json``, the base's ``dvae.pth``, ``mel_stats.pth`` and
``speakers_xtts.pth`` (when the base has it), ``xtts_ft_meta.json`` and a ``README.md`` with the
loading code. Stock ``Xtts.load_checkpoint(config, checkpoint_dir=DIR)`` loads it; the project
contributes only its tokenizer (Amharic text normalisation), plugged in as ``model.tokenizer``.
Because it carries every base-model file (the DVAE included), an export is itself a complete base
model: ``base_model.source: DIR`` fine-tunes on top of it (a new speaker on an Amharic model), its
extended vocabulary becoming the next run's base vocabulary.

The folder is written to a temporary sibling and renamed into place, so a crash never leaves a
half-written export under the requested name.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import torch
from tokenizers import Tokenizer

from xtts_ft import __version__
from xtts_ft.base_model import BaseModelFiles
from xtts_ft.checkpoint_store import CheckpointStore
from xtts_ft.errors import CheckpointError, ModelError, TokenizerError
from xtts_ft.evaluate.readme import export_readme
from xtts_ft.inference.checkpoint_folder import (
    INFERENCE_PREFIXES,
    TRAINING_STATE,
    checkpoint_settings,
    gpt_relative_state,
    load_checkpoint_gpt_state,
    refuse_folder_of_checkpoints,
)
from xtts_ft.layout import VOCAB_FILE, CheckpointLayout
from xtts_ft.model import base_state_dict, describe_vocab, load_state_dict_file
from xtts_ft.model_folder import EXPORT_META, ModelFolder
from xtts_ft.output_folder import REFUSE, check_output, staged_output
from xtts_ft.safe_load import load_weights
from xtts_ft.text_settings import TextSettings
from xtts_ft.tokenizer.fingerprint import vocab_fingerprint
from xtts_ft.tokenizer.resize import TEXT_ROW_KEYS

if TYPE_CHECKING:
    from xtts_ft.json_types import JsonObject

log = logging.getLogger(__name__)

def _check_gpt_state(gpt_state: dict[str, torch.Tensor], base_gpt: dict[str, torch.Tensor], n_tokens: int,
                     vocab_path: Path) -> None:
    rows = gpt_state["text_embedding.weight"].shape[0]
    if rows != n_tokens:
        raise TokenizerError(
            f"{vocab_path}: has {n_tokens} tokens but the fine-tuned GPT has {rows} text rows; export with the "
            f"vocab.json the checkpoint was trained with"
        )
    missing = sorted(set(base_gpt) - set(gpt_state))
    unexpected = sorted(set(gpt_state) - set(base_gpt))
    if missing or unexpected:
        raise CheckpointError(
            f"fine-tuned GPT does not match the base model's GPT (missing {missing[:3]}, unexpected {unexpected[:3]}); "
            f"was it trained from this base model?"
        )
    for key, value in base_gpt.items():
        if key not in TEXT_ROW_KEYS and tuple(value.shape) != tuple(gpt_state[key].shape):
            raise CheckpointError(
                f"fine-tuned GPT tensor {key} has shape {tuple(gpt_state[key].shape)}, the base model's "
                f"{tuple(value.shape)}; was it trained from this base model?"
            )


def _export_config(base: BaseModelFiles, vocab_path: Path, n_tokens: int, language: str) -> JsonObject:
    raw: JsonObject = json.loads(base.config_json.read_text(encoding="utf-8"))
    tok = Tokenizer.from_file(str(vocab_path))
    ids = {name: tok.token_to_id(name) for name in ("[START]", "[STOP]", f"[{language}]")}
    absent = [name for name, i in ids.items() if i is None]
    if absent:
        raise TokenizerError(f"{vocab_path}: lacks {', '.join(absent)}; use the extended vocab.json of the run")
    args = raw.setdefault("model_args", {})
    args["gpt_number_text_tokens"] = n_tokens
    args["gpt_start_text_token"] = ids["[START]"]
    args["gpt_stop_text_token"] = ids["[STOP]"]
    args["tokenizer_file"] = ""  # coqui then reads vocab.json beside model.pth
    languages = list(raw.get("languages") or [])
    if language not in languages:
        languages.append(language)
    raw["languages"] = languages
    return raw


def _check_out_dir(out_dir: Path, on_existing: str) -> None:
    """An earlier export there is replaced; anything else only with ``--move-old-aside`` (output_folder.py)."""
    if out_dir.is_file():
        raise ModelError(f"--out {out_dir}: is a file; give a folder for the export")
    check_output(out_dir, "export", on_existing, legacy=EXPORT_META)


def export_model(
    *,
    base: BaseModelFiles,
    vocab_path: Path,
    gpt_state_dict: dict[str, torch.Tensor],
    out_dir: Path,
    text: TextSettings,
    language: str,
    extra_meta: Optional[JsonObject] = None,
    on_existing: str = REFUSE,
) -> Path:
    """Write the export folder (atomically) and return its path.

    ``text`` (the run's text settings) and ``language`` (the run's ``run.language``) are written
    into the metadata, so inference tokenises exactly as training did.
    """
    vocab_path, out_dir = Path(vocab_path), Path(out_dir)
    _check_out_dir(out_dir, on_existing)
    if not vocab_path.is_file():
        raise TokenizerError(f"{vocab_path}: vocab.json not found; export needs the run's extended vocabulary")
    gpt_state = gpt_relative_state(gpt_state_dict, "fine-tuned GPT state")
    n_tokens = describe_vocab(vocab_path)
    state = base_state_dict(base.model_pth)
    state = {k: v for k, v in state.items() if not k.startswith(tuple("gpt." + p for p in INFERENCE_PREFIXES))}
    base_gpt = {k[4:]: v for k, v in state.items() if k.startswith("gpt.")}
    _check_gpt_state(gpt_state, base_gpt, n_tokens, vocab_path)
    model_state = {k: v for k, v in state.items() if not k.startswith("gpt.")}
    for key, value in gpt_state.items():
        model_state["gpt." + key] = value.detach().to("cpu", base_gpt[key].dtype).contiguous().clone()
    if "mel_stats" not in model_state:
        model_state["mel_stats"] = load_state_dict_file(base.mel_stats_pth)
    config = _export_config(base, vocab_path, n_tokens, language)
    if base.speakers_pth is not None:
        load_weights(base.speakers_pth, ModelError)  # copied, not loaded: never pass on a file that would run code
    load_weights(base.dvae_pth, ModelError)  # copied too (training read it through load_weights; --base-model may not)

    meta = {
        "format": 1,
        "xtts_ft_version": __version__,
        "language": language,
        "text": text.to_dict(),
        "vocab_fingerprint": vocab_fingerprint(vocab_path),
        "text_tokens": n_tokens,
        "base_model": str(base.root),
        "source_checkpoint": None,
        "step": None,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    meta.update(extra_meta or {})

    with staged_output(out_dir, "export", on_existing, legacy=EXPORT_META) as staged:
        folder = ModelFolder(staged.path)
        torch.save({"model": model_state}, folder.model)
        folder.config_json.write_text(json.dumps(config, indent=2, ensure_ascii=False), encoding="utf-8")
        shutil.copyfile(vocab_path, folder.vocab)
        shutil.copyfile(base.dvae_pth, folder.dvae)  # a complete model folder: the base of a further fine-tune
        shutil.copyfile(base.mel_stats_pth, folder.mel_stats)
        if base.speakers_pth is not None:
            shutil.copyfile(base.speakers_pth, folder.speakers)
        folder.export_meta.write_text(json.dumps(meta, indent=2, ensure_ascii=False, default=str), encoding="utf-8")
        folder.readme.write_text(export_readme(out_dir.resolve(), meta), encoding="utf-8")
    if staged.moved_to is not None:
        log.info("moved the earlier content of %s to %s", out_dir, staged.moved_to)
    log.info("exported %d text tokens, language '%s' to %s", n_tokens, language, out_dir)
    return out_dir


def export_from_checkpoint(ckpt_dir: Path, out_dir: Path, base: BaseModelFiles, on_existing: str = REFUSE) -> Path:
    """``python -m xtts_ft export --checkpoint CKPT --out DIR``: a checkpoint folder -> an export folder."""
    ckpt_dir = Path(ckpt_dir)
    if not ckpt_dir.is_dir():
        raise CheckpointError(f"--checkpoint {ckpt_dir}: folder not found")
    _check_out_dir(Path(out_dir), on_existing)  # before the weights are read: a wrong --out fails at once
    refuse_folder_of_checkpoints(ckpt_dir)
    if not CheckpointStore.holds_weights(ckpt_dir):
        raise CheckpointError(f"{ckpt_dir}: no {TRAINING_STATE}; pass a checkpoint folder such as checkpoints/step_001000")
    vocab = CheckpointLayout(ckpt_dir).vocab
    if not vocab.is_file():
        raise CheckpointError(f"{ckpt_dir}: no {VOCAB_FILE}; a checkpoint folder keeps the vocabulary it was trained with")
    settings = checkpoint_settings(ckpt_dir)
    recorded = settings["vocab_fingerprint"]
    if recorded and recorded != vocab_fingerprint(vocab):
        raise TokenizerError(f"{vocab}: fingerprint differs from the one in the checkpoint's record ({recorded}); "
                             f"the vocab was changed")
    gpt_state = load_checkpoint_gpt_state(ckpt_dir)
    if CheckpointLayout(ckpt_dir).dvae.is_file():  # a run with the DVAE stage: its fine-tuned DVAE goes along
        base = dataclasses.replace(base, dvae_pth=CheckpointLayout(ckpt_dir).dvae)
    extra = {
        "source_checkpoint": str(ckpt_dir.resolve()),
        "step": settings["step"],
        "checkpoint_meta": settings["checkpoint_meta"],
    }
    return export_model(
        base=base, vocab_path=vocab, gpt_state_dict=gpt_state, out_dir=out_dir,
        text=settings["text"], language=settings["language"], extra_meta=extra, on_existing=on_existing,
    )
