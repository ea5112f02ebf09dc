"""Load a model for synthesis: an export folder, or a training checkpoint folder plus the base model.

The tokenizer is always the folder's own ``vocab.json`` with the text front-end settings the
run used (from ``xtts_ft_meta.json`` or the checkpoint's ``config.yaml``), and the meta names the
language the model was fine-tuned for. An export is loaded with stock coqui (``Xtts.load_checkpoint``),
exactly as the README shows. Used by the one-WAV command (``evaluate/infer.py``), the standalone
evaluation and the speech server (``serve/model_source.py``).
"""

from __future__ import annotations

import json
import logging
import pickle
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from TTS.tts.models.xtts import Xtts

from xtts_ft.base_model import BaseModelFiles
from xtts_ft.errors import CheckpointError, ModelError
from xtts_ft.inference.checkpoint_folder import checkpoint_settings, load_checkpoint_gpt_state
from xtts_ft.layout import CheckpointLayout
from xtts_ft.model import build_xtts, load_state_dict_file, load_xtts_config
from xtts_ft.model_folder import ModelFolder
from xtts_ft.safe_load import first_line, load_weights, unpickling_message
from xtts_ft.text_settings import TextSettings
from xtts_ft.tokenizer.voice_tokenizer import make_tokenizer

if TYPE_CHECKING:
    from xtts_ft.json_types import JsonObject
    from xtts_ft.tokenizer import AmharicTokenizer

log = logging.getLogger(__name__)

#: (xtts, tokenizer, meta): the model, the tokenizer it reads text with, and what the folder says of its training
#: (an export's xtts_ft_meta.json; a checkpoint's language and step).
LoadedModel = tuple[Xtts, "AmharicTokenizer", "JsonObject"]


def load_export(model_dir: Path, *, normalizer: Optional[Callable[[str], str]] = None, device: str = "cpu") -> LoadedModel:
    """(xtts, tokenizer, meta) from an export folder, loaded with stock coqui classes."""
    model_dir = Path(model_dir)
    folder = ModelFolder(model_dir)
    meta_path = folder.export_meta
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8")) if meta_path.is_file() else {}
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelError(f"{meta_path}: not valid JSON ({exc}); export the model again") from None
    config = load_xtts_config(folder.config_json)
    speakers = folder.speakers
    if speakers.is_file():  # coqui's SpeakerManager reads it; refuse a file that would run code first
        load_weights(speakers, ModelError)
    xtts = Xtts(config)
    try:  # coqui reads model.pth with torch.load(weights_only=True) (torch >= 2.4, pinned in requirements.txt)
        xtts.load_checkpoint(config, checkpoint_dir=str(model_dir), eval=True)
    except pickle.UnpicklingError as exc:
        raise ModelError(unpickling_message(folder.model, exc)) from None
    except (RuntimeError, FileNotFoundError, KeyError, EOFError) as exc:
        raise ModelError(f"{model_dir}: coqui cannot load this folder ({first_line(exc)})") from None
    settings = TextSettings.from_dict(meta.get("text"), str(meta_path), ModelError)
    xtts.tokenizer = make_tokenizer(folder.vocab, settings, normalizer=normalizer)
    return xtts.to(device), xtts.tokenizer, meta


def load_checkpoint_folder(
    ckpt_dir: Path, base: BaseModelFiles, *, normalizer: Optional[Callable[[str], str]] = None, device: str = "cpu"
) -> LoadedModel:
    """(xtts, tokenizer, meta) from a training checkpoint folder and the base model it was trained from."""
    ckpt_dir = Path(ckpt_dir)
    settings = checkpoint_settings(ckpt_dir)
    vocab = CheckpointLayout(ckpt_dir).vocab
    if not vocab.is_file():
        raise CheckpointError(f"{ckpt_dir}: no vocab.json; a checkpoint folder keeps the vocabulary it was trained with")
    tokenizer = make_tokenizer(vocab, settings["text"], normalizer=normalizer)
    xtts = build_xtts(base, vocab, tokenizer)
    try:
        xtts.gpt.load_state_dict(load_checkpoint_gpt_state(ckpt_dir), strict=True)
    except RuntimeError as exc:
        raise CheckpointError(
            f"{ckpt_dir}: GPT weights do not fit the base model ({str(exc).splitlines()[0]}); pass the base it was "
            f"trained from"
        ) from None
    xtts.mel_stats.copy_(load_state_dict_file(base.mel_stats_pth))
    xtts.train(False)
    return xtts.to(device), tokenizer, {"language": settings["language"], "step": settings["step"]}
