"""Does a sample say its text, and does it sound like its reference voice?

* ``cer``: the sample is transcribed by the run's speech recogniser (``asr.model``) and scored
  against the text it was asked to say with :func:`xtts_ft.text.error_rates.error_rates`
  (numbers read out, homophones folded, punctuation dropped; spaces count). 0 is perfect; a
  babbling sample that never stops scores above 1.
* ``speaker_similarity``: cosine similarity of the speaker embeddings that XTTS's own speaker
  encoder (the one in its HiFi-GAN decoder, which conditions every synthesis) gives the sample
  and its reference clip. No extra model is downloaded; 1 is identical, unrelated voices of a
  trained encoder typically score well below the same voice's clips.
* Length buckets (``short``/``medium``/``long`` by characters of normalised text; short is the
  project's one rule, ``xtts_ft.config.is_short_text``): short texts are where XTTS most often
  babbles and misses the stop token, so stop rate and CER are also reported per bucket.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Protocol

import numpy as np
import torch

from xtts_ft.asr.recognizer import Recognizer
from xtts_ft.audio_io import load_audio
from xtts_ft.config import Config, is_short_text
from xtts_ft.text.error_rates import error_rates

if TYPE_CHECKING:
    from TTS.tts.models.xtts import Xtts

    from xtts_ft.evaluate.synthesis import SampleResult

log = logging.getLogger(__name__)

#: The buckets of normalised text length, shortest first.
LENGTH_BUCKETS = ("short", "medium", "long")
MEDIUM_TEXT_CHARS = 150  # the most characters of a medium text; a longer one is long


class Transcriber(Protocol):
    """What evaluation needs of a recogniser (:class:`~xtts_ft.asr.recognizer.Recognizer`, or a test's stand-in):
    the text heard in each audio file, in order."""

    def transcribe_files(self, paths: Sequence[Path]) -> list[str]: ...


def length_bucket(normalized_text: str) -> str:
    if is_short_text(normalized_text):
        return "short"
    return "medium" if len(normalized_text) <= MEDIUM_TEXT_CHARS else "long"


def _embedding(xtts: Xtts, path: Path) -> torch.Tensor:
    mono, sr = load_audio(path)
    audio = torch.from_numpy(mono).reshape(1, -1)
    param = next(xtts.hifigan_decoder.parameters())
    with torch.inference_mode():
        return xtts.get_speaker_embedding(audio.to(param.device), sr).flatten().float().cpu()


def speaker_similarities(xtts: Xtts, pairs: Sequence[tuple[Path, Path]]) -> list[float]:
    """Cosine similarity of XTTS speaker embeddings for each (sample, reference) pair."""
    cache: dict[Path, torch.Tensor] = {}
    out: list[float] = []
    encoder = xtts.hifigan_decoder.speaker_encoder
    was_training = encoder.training
    encoder.train(False)  # batch norm statistics must not move
    try:
        for sample, reference in pairs:
            for p in (sample, reference):
                if p not in cache:
                    cache[p] = _embedding(xtts, p)
            out.append(float(torch.nn.functional.cosine_similarity(cache[sample], cache[reference], dim=0)))
    finally:
        encoder.train(was_training)
    return out


def score_samples(samples: Sequence[SampleResult], xtts: Xtts, recognizer: Optional[Transcriber] = None) -> None:
    """Fill ``speaker_similarity`` (always) and ``recognized_text``/``cer`` (with a recogniser) in place."""
    if not samples:
        return
    for s, sim in zip(samples, speaker_similarities(xtts, [(s.path, s.reference_wav) for s in samples])):
        s.speaker_similarity = sim
    if recognizer is None:
        return
    for s, text in zip(samples, recognizer.transcribe_files([s.path for s in samples])):
        s.recognized_text = text
        s.cer = error_rates(s.text, text).cer


def finite_mean(values: Iterable[Optional[float]]) -> Optional[float]:
    """The mean of the finite values (None: there are none)."""
    finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    return float(np.mean(finite)) if finite else None


def intelligibility_metrics(samples: Sequence[SampleResult]) -> dict[str, float]:
    """``sample_cer``, ``sample_speaker_similarity`` and per-bucket stop rate and CER (absent: nothing to average)."""
    out: dict[str, Optional[float]] = {
        "sample_cer": finite_mean([s.cer for s in samples]),
        "sample_speaker_similarity": finite_mean([s.speaker_similarity for s in samples]),
    }
    for name in LENGTH_BUCKETS:
        group = [s for s in samples if length_bucket(s.normalized_text) == name]
        if group:
            out[f"sample_stop_rate_{name}"] = finite_mean([float(s.ended_with_stop) for s in group])
            out[f"sample_cer_{name}"] = finite_mean([s.cer for s in group])
    return {k: v for k, v in out.items() if v is not None}


def load_eval_recognizer(cfg: Config) -> Optional[Recognizer]:
    """The recogniser evaluation uses (None when ``evaluation.recognize`` is off); fails early, in one line."""
    if not cfg.evaluation.recognize:
        return None
    recognizer = Recognizer.from_config(cfg.asr)
    log.info("evaluation: samples are transcribed by %s", cfg.asr.model)
    return recognizer
