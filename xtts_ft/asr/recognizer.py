"""Recognise speech with a transformers CTC model: 16 kHz audio in, Ethiopic text out.

``Recognizer`` wraps ``AutoModelForCTC`` and ``AutoProcessor`` (raw-waveform wav2vec2/XLS-R models
and filterbank w2v-BERT models alike), runs clips in length-sorted batches on the GPU or CPU and
decodes greedily (:func:`greedy_ctc_decode`): best token per frame, repeats merged, blanks
dropped, the word delimiter read as a space.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Optional

import numpy as np
import numpy.typing as npt
import torch
from transformers import AutoModelForCTC, AutoProcessor

from xtts_ft.asr.model_files import resolve_asr_model
from xtts_ft.audio_io import RECOGNIZER_RATE, DecodeError, decode, resample
from xtts_ft.config import AsrConfig
from xtts_ft.errors import DataError, ModelError

log = logging.getLogger(__name__)



def greedy_ctc_decode(
    frame_ids: Sequence[int], blank_id: int, id_to_token: dict[int, str], word_delimiter: str = "|",
    skip_ids: frozenset[int] = frozenset(),
) -> str:
    """Text of one utterance from its best token id per frame (CTC best path).

    Repeated ids are merged unless a blank separates them (so ``a a _ a`` is ``aa``); blanks and
    ``skip_ids`` (other special tokens) emit nothing; the word delimiter becomes one space.
    """
    out: list[str] = []
    previous = None
    for token_id in frame_ids:
        if token_id != previous and token_id != blank_id and token_id not in skip_ids:
            token = id_to_token.get(token_id, "")
            out.append(" " if token == word_delimiter else token)
        previous = token_id
    return " ".join("".join(out).split())


def to_16k(audio: npt.NDArray[np.float32], sample_rate: int) -> npt.NDArray[np.float32]:
    """Mono float32 at 16 kHz (the rate every recogniser here was trained on)."""
    audio = np.asarray(audio, dtype=np.float32)
    if audio.ndim == 2:
        audio = audio.mean(axis=1)
    return resample(audio, sample_rate, RECOGNIZER_RATE)


MIN_AUDIO_S = 0.1  # shorter clips hold no word; wav2vec2's feature encoder fails below 25 ms


class Recognizer:
    """A loaded CTC recogniser; build it with :meth:`from_config` or from a model folder."""

    def __init__(self, folder: Path, device: str = "auto", batch_size: int = 8) -> None:
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        try:
            self.processor = AutoProcessor.from_pretrained(str(folder))
            self.model = AutoModelForCTC.from_pretrained(str(folder)).to(device).eval()
        except (OSError, ValueError, KeyError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ModelError(f"asr.model: '{folder}' is not a loadable transformers CTC model ({first})") from None
        self.folder = Path(folder)
        self.device = device
        self.batch_size = batch_size
        tokenizer = self.processor.tokenizer
        vocab = tokenizer.get_vocab()
        self.id_to_token = {i: t for t, i in vocab.items()}
        self.blank_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.word_delimiter = getattr(tokenizer, "word_delimiter_token", None) or "|"
        specials = {tokenizer.unk_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id}
        self.skip_ids = frozenset(i for i in specials if i is not None and i != self.blank_id)

    @classmethod
    def from_config(cls, cfg: AsrConfig, model: Optional[str] = None) -> Recognizer:
        """The recogniser ``cfg`` names (``model`` overrides asr.model), fetched into the hub cache if needed."""
        if model and model != cfg.model:  # the configured revision belongs to the configured model
            cfg = replace(cfg, model=model, revision=None)
        return cls(resolve_asr_model(cfg), device=cfg.device, batch_size=cfg.batch_size)

    def _batch(self, clips: list[npt.NDArray[np.float32]]) -> list[str]:
        inputs = self.processor.feature_extractor(
            clips, sampling_rate=RECOGNIZER_RATE, padding=True, return_attention_mask=True, return_tensors="pt"
        )
        inputs = {k: v.to(self.device) for k, v in inputs.items()}
        with torch.inference_mode():
            logits = self.model(**inputs).logits
        mask = inputs.get("attention_mask")
        if mask is not None:
            lengths = self.model._get_feat_extract_output_lengths(mask.sum(-1)).tolist()
        else:
            lengths = [logits.shape[1]] * len(clips)
        best = logits.argmax(-1).cpu().tolist()
        return [
            greedy_ctc_decode(ids[: min(int(n), len(ids))], self.blank_id, self.id_to_token, self.word_delimiter,
                              self.skip_ids)
            for ids, n in zip(best, lengths)
        ]

    def transcribe(self, clips: Sequence[npt.NDArray[np.float32]],
                   sample_rates: Sequence[int] | int = RECOGNIZER_RATE) -> list[str]:
        """Recognised text of each clip (float samples, mono or (frames, channels))."""
        rates = [sample_rates] * len(clips) if isinstance(sample_rates, int) else list(sample_rates)
        # A clip shorter than the feature encoder's window (a synthesised sample that stopped at once) is heard as
        # what it is, nothing, padded with silence rather than failing the whole batch.
        shortest = int(MIN_AUDIO_S * RECOGNIZER_RATE)
        audio = [np.pad(a, (0, max(0, shortest - len(a)))) for a in (to_16k(c, r) for c, r in zip(clips, rates))]
        # Similar lengths share a batch, so padding (which can change a model's output) stays small.
        order = sorted(range(len(audio)), key=lambda i: len(audio[i]))
        texts: dict[int, str] = {}
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            for i, text in zip(idx, self._batch([audio[i] for i in idx])):
                texts[i] = text
        return [texts[i] for i in range(len(audio))]

    def transcribe_files(self, paths: Sequence[str | Path], refuse_short: bool = False) -> list[str]:
        """Recognised text of each audio file (any format the data stage decodes).

        ``refuse_short``: a file under ``MIN_AUDIO_S`` is a user mistake (the ``transcribe`` command), not a
        sample to score as unheard (evaluation, the transcript check)."""
        clips, rates = [], []
        for path in paths:
            try:
                data, rate, _ = decode(str(path))
            except DecodeError as exc:
                raise DataError(f"{path}: cannot read the audio: {exc}") from None
            seconds = len(data) / rate if rate > 0 else 0.0
            if refuse_short and seconds < MIN_AUDIO_S:  # the recogniser's first convolutions need more samples
                what = "no audio in it" if len(data) == 0 else f"only {seconds * 1000:.0f} ms of audio"
                raise DataError(f"{path}: {what}; the recogniser needs at least {MIN_AUDIO_S:g} s of speech")
            clips.append(data)
            rates.append(rate)
        return self.transcribe(clips, rates)
