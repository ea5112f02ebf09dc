"""``python -m xtts_ft synthesize``: one text from an export folder (or a training checkpoint folder plus the base
model) into one WAV.

The model is loaded by :mod:`xtts_ft.inference.loading`; the language defaults to the one the model was fine-tuned
for, so a user passes only text and a voice.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable, Optional

import torch

from xtts_ft.base_model import BaseModelFiles
from xtts_ft.checkpoint_store import CheckpointStore
from xtts_ft.config import RunConfig
from xtts_ft.errors import CheckpointError, DataError, ModelError
from xtts_ft.evaluate.synthesis import synthesize_requests
from xtts_ft.inference.checkpoint_folder import TRAINING_STATE
from xtts_ft.inference.conditioning import check_reference
from xtts_ft.inference.loading import load_checkpoint_folder, load_export
from xtts_ft.model_folder import EXPORT_FILES, is_export

log = logging.getLogger(__name__)


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
