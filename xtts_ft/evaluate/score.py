"""``python -m xtts_ft score --model EXPORT_OR_CHECKPOINT``: how well does a model say the test sentences?

Synthesises ``evaluation.sentences`` in each reference voice (``--speaker-wav`` or
``evaluation.speaker_wavs``), transcribes every sample with ``asr.model`` and prints, per sample
and as means: CER, speaker similarity and whether generation ended with the stop token, plus
stop rate and CER per length bucket. The WAVs stay in ``--out`` for listening.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional, Sequence

import torch

from xtts_ft.asr.recognizer import Recognizer
from xtts_ft.checkpoint_store import CheckpointStore
from xtts_ft.config import Config
from xtts_ft.errors import DataError, ModelError
from xtts_ft.evaluate.hook import summarize
from xtts_ft.evaluate.intelligibility import length_bucket, score_samples
from xtts_ft.evaluate.synthesis import synthesize_samples
from xtts_ft.inference.checkpoint_folder import TRAINING_STATE, base_for_checkpoint
from xtts_ft.inference.loading import LoadedModel, load_checkpoint_folder, load_export
from xtts_ft.model_folder import EXPORT_FILES, is_export

log = logging.getLogger(__name__)


def load_model(model_dir: Path, base_model: Optional[str], device: str) -> LoadedModel:
    """(xtts, tokenizer, meta) of an export folder or a training checkpoint folder."""
    if is_export(model_dir):
        return load_export(model_dir, device=device)
    if CheckpointStore.holds_weights(model_dir):
        return load_checkpoint_folder(model_dir, base_for_checkpoint(model_dir, base_model), device=device)
    raise ModelError(
        f"--model {model_dir}: neither an export folder ({' + '.join(EXPORT_FILES)}) nor a checkpoint folder "
        f"({TRAINING_STATE})"
    )


def score_command(
    cfg: Config, model_dir: Path, out_dir: Path, speaker_wavs: Sequence[str] = (), base_model: Optional[str] = None
) -> dict[str, float]:
    wavs = [Path(w) for w in (speaker_wavs or cfg.evaluation.speaker_wavs)]
    if not wavs:
        raise DataError("score: no reference voice; pass --speaker-wav FILE or set evaluation.speaker_wavs")
    for w in wavs:
        if not w.is_file():
            raise DataError(f"--speaker-wav {w}: file not found; give a clean 3-10 s recording of the voice")
    if not Path(model_dir).is_dir():
        raise ModelError(f"--model {model_dir}: folder not found")
    recognizer = Recognizer.from_config(cfg.asr)
    device = "cuda" if torch.cuda.is_available() and cfg.run.device != "cpu" else "cpu"
    xtts, tokenizer, meta = load_model(Path(model_dir), base_model, device)
    ev = cfg.evaluation
    samples = synthesize_samples(
        xtts, tokenizer, list(ev.sentences), wavs, Path(out_dir), language=meta.get("language") or cfg.run.language,
        temperature=ev.temperature, seed=cfg.run.seed, max_new_tokens=ev.max_new_tokens,
    )
    score_samples(samples, xtts, recognizer)
    print("sample\tbucket\tended\tCER\tsimilarity\ttext\theard")
    for s in samples:
        print(f"{s.path}\t{length_bucket(s.normalized_text)}\t{'stop' if s.ended_with_stop else 'limit'}\t"
              f"{s.cer:.3f}\t{s.speaker_similarity:.3f}\t{s.text}\t{s.recognized_text}")
    metrics = summarize(samples, [])
    for key in sorted(k for k in metrics if k.startswith(("sample_cer", "sample_speaker", "sample_stop_rate"))):
        print(f"{key}\t{metrics[key]:.3f}")
    return metrics
