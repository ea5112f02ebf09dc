"""What a voice reference gives the model: the clip read as coqui reads it, checked, and its conditioning latents.

Evaluation (``evaluate/synthesis.py``) and the speech server (``serve/engine.py``, ``serve/voices.py``) both
condition the GPT through these functions, so a voice sounds the same in the report and from the server.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
import torchaudio

from xtts_ft.audio_io import DATASET_RATE, DecodeError, decode
from xtts_ft.errors import DataError, TokenizerError
from xtts_ft.languages import canonical_language
from xtts_ft.safe_load import first_line

if TYPE_CHECKING:
    from TTS.tts.models.xtts import Xtts

    from xtts_ft.tokenizer import AmharicTokenizer

#: What conditioning on a voice gives: (the GPT's conditioning latent, the speaker embedding).
Latents = tuple[torch.Tensor, torch.Tensor]

MIN_REFERENCE_S = 0.5  # shortest voice reference accepted (the dataset's default shortest clip)


def check_language(tokenizer: AmharicTokenizer, language: str) -> None:
    code = canonical_language(language).split("-")[0]
    if tokenizer.tokenizer is None or tokenizer.tokenizer.token_to_id(f"[{code}]") is None:
        raise TokenizerError(
            f"the vocabulary has no [{code}] token, so language '{language}' cannot be encoded; use the extended "
            f"vocab.json built for this run"
        )


def reference_audio(wav: Path, rate: int = DATASET_RATE) -> torch.Tensor:
    """A voice reference as coqui's ``load_audio`` gives it to ``Xtts.get_conditioning_latents``: (1, samples) float32
    at ``rate``, the channels averaged, resampled as coqui resamples (``torchaudio.functional.resample``), clipped to
    [-1, 1]. Read with soundfile (:func:`xtts_ft.audio_io.decode`, ffmpeg for what it cannot read) on every torch:
    coqui reads with ``torchaudio.load``, which from torchaudio 2.9 on needs torchcodec and FFmpeg's libraries."""
    data, file_rate, _ = decode(str(wav))
    audio = torch.from_numpy(np.ascontiguousarray(data.T))  # (channels, samples)
    if audio.shape[0] != 1:
        audio = audio.mean(dim=0, keepdim=True)
    if file_rate != rate:
        audio = torchaudio.functional.resample(audio, file_rate, rate)
    return audio.clip_(-1, 1)


def conditioning(xtts: Xtts, wav: Path) -> Latents:
    """``Xtts.get_conditioning_latents`` of one clip with the model config's settings (the GPT's conditioning latent,
    the speaker embedding), its steps on the audio :func:`reference_audio` reads: coqui's own method reads the file
    with ``torchaudio.load``."""
    cfg = xtts.config
    rate = DATASET_RATE  # get_conditioning_latents' load_sr
    with torch.inference_mode():
        audio = reference_audio(wav, rate)[:, : rate * cfg.max_ref_len].to(xtts.device)
        if cfg.sound_norm_refs:
            audio = (audio / torch.abs(audio).max()) * 0.75
        speaker_embedding = xtts.get_speaker_embedding(audio, rate)
        gpt_cond_latent = xtts.get_gpt_cond_latents(audio, rate, length=cfg.gpt_cond_len,
                                                    chunk_length=cfg.gpt_cond_chunk_len)
    return gpt_cond_latent, speaker_embedding


def check_reference(wav: Path) -> None:
    """A voice reference must exist and decode the way :func:`reference_audio` reads it, or it is a one-line
    DataError."""
    if not wav.is_file():
        raise DataError(f"speaker wav '{wav}' does not exist; pass an existing audio file as the voice reference")
    try:
        audio, sr, _ = decode(str(wav))
    except DecodeError as exc:
        raise DataError(
            f"speaker wav '{wav}': cannot be decoded as audio ({first_line(exc)}); pass a WAV or FLAC recording of "
            f"the voice"
        ) from None
    if audio.size == 0:
        raise DataError(f"speaker wav '{wav}': holds no samples; pass a 3-10 s recording of the voice")
    seconds = audio.shape[0] / sr
    if seconds < MIN_REFERENCE_S:  # coqui's conditioning fails deep inside below about 0.33 s
        raise DataError(f"speaker wav '{wav}': only {seconds:.2f} s of audio; a voice reference needs at least "
                        f"{MIN_REFERENCE_S} s (3-10 s recommended)")
