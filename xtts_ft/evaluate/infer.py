"""Synthesise one text from an export folder (or a training checkpoint folder plus the base model).

The tokenizer is always the folder's own ``vocab.json`` with the text front-end settings the
run used (from ``xtts_ft_meta.json`` or the checkpoint's ``config.yaml``), and the language
defaults to the one the model was fine-tuned for, so a user passes only text and a voice.
An export is loaded with stock coqui (``Xtts.load_checkpoint``), exactly as the README shows.
"""

from __future__ import annotations

import json
import logging
import pickle
from pathlib import Path
from typing import Callable, Optional

import torch
from TTS.tts.models.xtts import Xtts

from xtts_ft.base_model import BaseModelFiles
from xtts_ft.checkpoint_store import CheckpointStore
from xtts_ft.config import RunConfig
from xtts_ft.errors import CheckpointError, DataError, ModelError
from xtts_ft.evaluate.export import TRAINING_STATE, checkpoint_settings, load_checkpoint_gpt_state
from xtts_ft.evaluate.synthesis import check_reference, synthesize_requests
from xtts_ft.layout import CheckpointLayout
from xtts_ft.model import build_xtts, load_state_dict_file, load_xtts_config
from xtts_ft.model_folder import EXPORT_FILES, ModelFolder, is_export
from xtts_ft.safe_load import first_line, load_weights, unpickling_message
from xtts_ft.text_settings import TextSettings
from xtts_ft.tokenizer.voice_tokenizer import make_tokenizer

log = logging.getLogger(__name__)


def load_export(model_dir: Path, *, normalizer: Optional[Callable[[str], str]] = None, device: str = "cpu"):
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
):
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


def synthesize_command(
    model_dir: Path,
    text: str,
    speaker_wav: Path,
    out: Path,
    *,
    language: Optional[str] = None,
    base: Optional[BaseModelFiles] = None,
    temperature: float,
    seed: int = 0,
    max_new_tokens: Optional[int] = None,
    normalizer: Optional[Callable[[str], str]] = None,
    device: Optional[str] = None,
) -> Path:
    """Write ``out`` (a 24 kHz WAV) speaking ``text`` in the voice of ``speaker_wav``.

    ``model_dir`` is an export folder, or a training checkpoint folder together with ``base``.
    ``language`` defaults to the model's fine-tuned language. ``normalizer`` replaces the
    project's Amharic normaliser (tests only).
    """
    model_dir, out, speaker_wav = Path(model_dir), Path(out), Path(speaker_wav)
    if out.suffix.lower() != ".wav":
        raise DataError(f"--out {out}: give a .wav file name")
    if not speaker_wav.is_file():
        raise DataError(f"--speaker-wav {speaker_wav}: file not found; give a clean 3-10 s recording of the voice")
    if not text.strip():
        raise DataError("--text: empty; give the text to speak")
    check_reference(speaker_wav)  # a clip too short or not audio: said before the model loads
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if is_export(model_dir):
        xtts, tokenizer, meta = load_export(model_dir, normalizer=normalizer, device=device)
    elif CheckpointStore.holds_weights(model_dir):
        if base is None:
            raise CheckpointError(
                f"{model_dir}: is a training checkpoint; pass the base model too, or export it first "
                f"(python -m xtts_ft export --checkpoint {model_dir} --out DIR)"
            )
        xtts, tokenizer, meta = load_checkpoint_folder(model_dir, base, normalizer=normalizer, device=device)
    else:
        raise ModelError(
            f"{model_dir}: neither an export folder ({' + '.join(EXPORT_FILES)}) nor a checkpoint folder ({TRAINING_STATE})"
        )
    language = language or meta.get("language") or RunConfig.language  # an export before meta had it: the default
    results = synthesize_requests(
        xtts, tokenizer, [(out.stem, 0, text, speaker_wav)], out.parent, language=language,
        temperature=temperature, seed=seed, max_new_tokens=max_new_tokens,
    )
    r = results[0]
    if not r.ended_with_stop:
        log.warning("%s: generation ran to the length limit (%d codes); the audio may be cut or babbling", out, r.n_codes)
    log.info("wrote %s (%.2f s, language %s)", r.path, r.duration_s, language)
    return r.path
