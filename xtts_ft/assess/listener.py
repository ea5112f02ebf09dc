"""A clip heard the way a listener would: how it sounds, how noisy it is, and whether it stops after its text.

:class:`Listener` scores one clip:

- ``mos``: DNSMOS's predicted overall quality, 1-5 (:mod:`xtts_ft.quality.predictor`; trained on English
  ratings: compare clips scored the same way, never read it alone);
- ``snr_db``: the SNR estimate, silero-vad's speech windows against the noise floor of its pauses
  (:mod:`xtts_ft.quality.voice_activity`, the measure prepare's ``dataset.min_snr_db`` is held to);
- with a text and a recogniser, ``tail_s``: the seconds of speech after the text's last word. The text is
  aligned to the audio by CTC forced alignment with the recogniser, exactly as the short pieces are
  (:class:`xtts_ft.ingest.short_pieces.WordAligner`: each word gets the frames of its letters, and a
  wildcard after the text takes whatever is said past it), and silero-vad's speech windows that start after
  the last word's last letter are counted. A sample that says its text and stops scores about 0 (the demo's
  clips: 0-0.08 s); one that goes on talking scores the length of what it adds (a demo clip followed by
  0.3 s of silence and a second of another clip: 0.92-1.07 s). An alignment that cannot be made (more
  letters than the audio has frames) gives no tail (None). And ``cer``: what the recogniser hears, scored
  against the text as the evaluation scores it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import numpy as np
import numpy.typing as npt

from xtts_ft.audio_io import DecodeError, decode, resample, to_mono
from xtts_ft.config import Config, IngestConfig
from xtts_ft.ingest.short_pieces import WordAligner
from xtts_ft.quality.predictor import MIN_AUDIO_S, predict_quality
from xtts_ft.quality.voice_activity import RATE, snr_db, speech_after, speech_mask, speech_probabilities
from xtts_ft.text.error_rates import error_rates

if TYPE_CHECKING:  # a name for annotations: the recogniser's module imports transformers
    from xtts_ft.asr.recognizer import Recognizer


class UnreadableAudio(Exception):
    """A file that holds no audio to listen to (the message says why, in a few words)."""


@dataclass(frozen=True)
class Heard:
    """What listening to one clip found (None: not measured, or nothing to measure)."""

    mos: Optional[float]
    snr_db: Optional[float]
    tail_s: Optional[float] = None
    cer: Optional[float] = None
    heard: Optional[str] = None  # the recogniser's transcript, with a text


def read_clip(path: Path) -> npt.NDArray[np.float32]:
    """A file's audio, mono at 16 kHz; UnreadableAudio when it cannot be decoded or is too short to rate."""
    try:
        data, rate, _ = decode(str(path))
    except DecodeError as exc:
        raise UnreadableAudio(f"cannot read the audio: {exc}") from None
    if data.size == 0 or rate <= 0:
        raise UnreadableAudio("no audio in it")
    audio = resample(to_mono(data), rate, RATE)
    if not np.isfinite(audio).all():
        raise UnreadableAudio("it holds NaN/Inf samples")
    if len(audio) < MIN_AUDIO_S * RATE:
        raise UnreadableAudio(f"only {len(audio) / RATE * 1000:.0f} ms of audio (at least {MIN_AUDIO_S:g} s needed)")
    return audio


class Listener:
    """Scores clips; ``recognizer`` (an :class:`xtts_ft.asr.recognizer.Recognizer`) adds ``tail_s`` and, with
    ``cer``, the CER for clips that come with a text (an evaluation has its samples' CER already: it asks for
    none, and saves a pass of the recogniser). The models load on first use, once per process."""

    def __init__(self, recognizer: Optional[Recognizer] = None, window_s: float = IngestConfig.window_s,
                 cer: bool = True) -> None:
        self.recognizer = recognizer
        self._aligner = WordAligner(recognizer, window_s) if recognizer is not None else None
        self._cer = cer

    def listen(self, audio: npt.NDArray[np.float32], text: Optional[str] = None) -> Heard:
        """Scores of a mono 16 kHz clip (at least MIN_AUDIO_S long); ``text``: what it should say."""
        mask = speech_mask(speech_probabilities(audio))
        mos, snr = predict_quality(audio).overall, snr_db(audio, mask)
        # the aligner is made from the recogniser: both are there or neither is
        if not text or not text.split() or self._aligner is None or self.recognizer is None:
            return Heard(mos, snr)
        spans = self._aligner.word_spans(audio, RATE, text.split(), 0.0)  # no score floor: a tail even when unsure
        ends = [span[1] for span in spans or () if span is not None]
        tail = speech_after(mask, max(ends)) if ends else None
        if not self._cer:
            return Heard(mos, snr, tail)
        heard = self.recognizer.transcribe([audio])[0]
        return Heard(mos, snr, tail, round(error_rates(text, heard).cer, 4), heard)

    def listen_file(self, path: Path, text: Optional[str] = None) -> Heard:
        """Scores of an audio file; UnreadableAudio when it holds nothing to listen to."""
        return self.listen(read_clip(Path(path)), text)


def sample_listener(cfg: Config, recognizer: Optional[Recognizer]) -> Optional[Listener]:
    """The listener an evaluation hands its samples to (``evaluation.quality``; None when it is off); with the
    evaluation's recogniser (None when ``evaluation.recognize`` is off: no tail) it also measures ``tail_s``."""
    return Listener(recognizer, cfg.ingest.window_s, cer=False) if cfg.evaluation.quality else None
