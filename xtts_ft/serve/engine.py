"""The one synthesis engine: the HTTP server, the Wyoming server and the web app's Speak tab all use it.

It is the evaluation's synthesis, kept loaded: the model comes from the project's loaders
(``xtts_ft.evaluate.infer`` via :mod:`.model_source`), the text goes through the model's own
tokenizer and normaliser (the export's recorded text settings: numbers read as words, as in
training), the GPT is readied with ``gpt_ready_for_inference`` and every layer checks the
caller's cancel callback through ``stop_checks`` (the evaluation's per-layer stop check), so a
client that goes away stops its generation within one layer's time.

Long text is split (:mod:`.text_pieces`) at sentence and clause marks into pieces that fit the
character and token limits; each piece is yielded as float32 audio as soon as it is ready.
One model serves everyone: pieces are synthesised one at a time under a lock (requests take
turns piece by piece).

Short-text mitigation (short inputs are where fine-tuned XTTS babbles):

1. fixed sampling per request: every piece is generated from ``ServeConfig.seed`` with the
   evaluation's temperature, so a text says the same every time;
2. a length cap per piece: generation stops at ``len(piece) * max_seconds_per_char + min_piece_s``
   seconds of codes instead of the model's ~40 s limit, so a piece that misses the stop token
   cannot babble on;
3. a plausibility retry: a short piece (``short_text_chars``) that hit its cap without the stop
   token is generated again with the next seed (``short_text_retries`` times); the first that
   stops is kept;
4. very short sentences inside a longer text are joined to a neighbour before synthesis.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional

import numpy as np
import torch
from transformers import StoppingCriteriaList

from xtts_ft.config import EvaluationConfig, RunConfig, ServeConfig
from xtts_ft.errors import DataError
from xtts_ft.evaluate.synthesis import (
    _CodeRecorder,
    _conditioning,
    _rng_devices,
    check_language,
    gpt_ready_for_inference,
    stop_checks,
)
from xtts_ft.serve.model_source import ResolvedModel
from xtts_ft.serve.text_pieces import split_pieces
from xtts_ft.serve.voices import Voice, VoiceLibrary, run_speaker_clips

log = logging.getLogger(__name__)

Cancel = Callable[[], bool]  # True: the caller no longer wants the audio


class SynthesisCancelled(BaseException):
    """Raised inside the model when the cancel callback says so. A BaseException (like the training stop) so
    no ``except Exception`` on the way (coqui, transformers) swallows it."""


@dataclass
class EngineStats:
    """Counters a server shows on /health (and tests read)."""

    pieces: int = 0
    cancelled: int = 0  # syntheses abandoned because their caller went away
    retries: int = 0  # short pieces generated again (mitigation step 3)
    capped: int = 0  # pieces that reached their length cap without the stop token (after retries)
    synthesis_s: float = 0.0
    audio_s: float = 0.0
    events: list[str] = field(default_factory=list)  # the last few notable events, newest last

    def note(self, line: str) -> None:
        self.events = (self.events + [line])[-20:]
        log.info("%s", line)


@dataclass(frozen=True)
class PieceResult:
    audio: np.ndarray  # float32, mono, at SpeechEngine.sample_rate
    ended_with_stop: bool
    n_codes: int
    cap: int
    attempts: int


class SpeechEngine:
    """A loaded model with its voices. Build with :meth:`open`."""

    def __init__(self, xtts, tokenizer, meta: dict, source: ResolvedModel, voices: VoiceLibrary, *,
                 settings: ServeConfig, temperature: float, max_codes: Optional[int] = None) -> None:
        self.xtts = xtts
        self.tokenizer = tokenizer
        self.meta = meta
        self.source = source
        self.voices = voices
        self.settings = settings
        self.temperature = temperature
        self.language: str = meta.get("language") or RunConfig.language
        known = [code for code in xtts.config.languages if tokenizer.tokenizer.token_to_id(f"[{code}]") is not None]
        self.languages: tuple[str, ...] = tuple(dict.fromkeys([self.language, *known]))  # the run's language first
        self.sample_rate: int = int(xtts.args.output_sample_rate)
        self.char_limit: int = int(tokenizer.char_limits.get(self.language, 250))
        self.max_text_tokens: int = int(xtts.args.gpt_max_text_tokens)
        self.model_max_codes: int = int(xtts.gpt.max_gen_mel_tokens)
        self.max_codes = min(self.model_max_codes, int(max_codes)) if max_codes else self.model_max_codes
        self.codes_per_second: float = float(xtts.config.audio.sample_rate) / float(xtts.args.gpt_code_stride_len)
        self.stats = EngineStats()
        self._lock = threading.Lock()
        check_language(tokenizer, self.language)
        xtts.tokenizer = tokenizer
        if "gpt_inference" not in xtts.gpt._modules:  # a checkpoint folder: ready once, not once per piece
            xtts.gpt.init_gpt_for_inference(kv_cache=True)
        xtts.train(False)  # serving only: dropout off for good (gpt_ready_for_inference restores this state)

    @classmethod
    def open(cls, source: ResolvedModel, device: str = "cpu", *, voices_dir: Optional[Path] = None,
             settings: Optional[ServeConfig] = None, temperature: float = EvaluationConfig.temperature,
             max_codes: Optional[int] = None) -> SpeechEngine:
        """Load ``source`` on ``device``; voices: the run's speakers (when the run is known) plus ``voices_dir``.

        ``max_codes`` lowers the model's audio-code limit (tests and benchmarks of random models, which never stop).
        """
        start = time.perf_counter()
        xtts, tokenizer, meta = source.load(device)
        language = meta.get("language") or RunConfig.language
        run_clips = run_speaker_clips(source.run_dir, language) if source.run_dir is not None else {}
        voices = VoiceLibrary(run_clips=run_clips, folder=voices_dir)
        engine = cls(xtts, tokenizer, meta, source, voices, settings=settings or ServeConfig(),
                     temperature=temperature, max_codes=max_codes)
        log.info("engine: %s on %s in %.1f s; language %s, %d voices", source.describe(), device,
                 time.perf_counter() - start, engine.language, len(voices.names()))
        return engine

    # --- text --------------------------------------------------------------------------------
    def normalized_text(self, text: str, language: Optional[str] = None) -> str:
        """What the model will read for ``text`` (numbers as words, punctuation unified)."""
        return self.tokenizer.preprocess_text(text, language or self.language).strip()

    def _fits(self, piece: str, language: str) -> bool:
        if len(piece) > self.char_limit:
            return False
        return len(self.tokenizer.encode(piece.lower(), lang=language)) < self.max_text_tokens

    def pieces(self, text: str, language: Optional[str] = None) -> list[str]:
        """The normalised text cut into the pieces that are synthesised one after another."""
        language = language or self.language
        normalized = self.normalized_text(text, language)
        return split_pieces(normalized, lambda p: self._fits(p, language), self.settings.min_piece_chars)

    def piece_cap(self, piece: str) -> int:
        """Most audio codes a piece may generate (mitigation step 2), never above the model's limit."""
        seconds = len(piece) * self.settings.max_seconds_per_char + self.settings.min_piece_s
        return max(1, min(self.max_codes, math.ceil(seconds * self.codes_per_second)))

    # --- synthesis ---------------------------------------------------------------------------
    def _check(self, cancel: Optional[Cancel]) -> None:
        if cancel is not None and cancel():
            raise SynthesisCancelled()

    def _generate(self, piece: str, language: str, latents: tuple, seed: int,
                  speed: float) -> tuple[np.ndarray, bool, int]:
        gpt_cond_latent, speaker_embedding = latents
        recorder = _CodeRecorder()
        with torch.random.fork_rng(devices=_rng_devices(self.xtts)):
            torch.manual_seed(seed)
            out = self.xtts.inference(
                piece, language, gpt_cond_latent, speaker_embedding, temperature=self.temperature, speed=speed,
                stopping_criteria=StoppingCriteriaList([recorder]),
            )
        codes = recorder.codes if recorder.codes is not None else torch.zeros(0, dtype=torch.long)
        ended = bool(codes.numel() and int(codes[-1]) == int(self.xtts.gpt.stop_audio_token))
        return np.asarray(out["wav"], dtype=np.float32).reshape(-1), ended, int(codes.numel())

    def synthesize_piece(self, piece: str, voice: Voice, *, language: Optional[str] = None, speed: float = 1.0,
                         cancel: Optional[Cancel] = None) -> PieceResult:
        """One piece (already normalised and within the limits), with the short-text mitigation."""
        language = language or self.language
        cap = self.piece_cap(piece)
        short = len(piece) <= self.settings.short_text_chars
        attempts = 1 + (self.settings.short_text_retries if short else 0)
        check = lambda: self._check(cancel)  # noqa: E731
        with self._lock:
            check()
            start = time.perf_counter()
            with torch.inference_mode(), gpt_ready_for_inference(self.xtts, cap), stop_checks(self.xtts, check):
                latents = self.voices.latents(voice, lambda path: _conditioning(self.xtts, path))
                kept = None
                for attempt in range(attempts):
                    result = self._generate(piece, language, latents, self.settings.seed + attempt, speed)
                    if kept is None or result[1]:  # the first attempt, or the first that stopped
                        kept = result
                    if result[1]:
                        break
                    if attempt + 1 < attempts:
                        self.stats.retries += 1
            audio, ended, n_codes = kept
            self.stats.pieces += 1
            self.stats.capped += 0 if ended else 1
            self.stats.synthesis_s += time.perf_counter() - start
            self.stats.audio_s += audio.size / self.sample_rate
        return PieceResult(audio, ended, n_codes, cap, attempt + 1)

    def synthesize(self, text: str, voice: str, *, language: Optional[str] = None, speed: float = 1.0,
                   cancel: Optional[Cancel] = None) -> Iterator[np.ndarray]:
        """Float32 audio chunks (one per piece, at :attr:`sample_rate`) as each piece is ready.

        ``cancel`` is asked before each piece and at every layer of the model; when it returns True
        the generator ends early (counted in ``stats.cancelled``). Raises ``DataError`` for empty
        text and ``VoiceError`` for an unknown voice before anything is synthesised.
        """
        language = language or self.language
        check_language(self.tokenizer, language)
        chosen = self.voices.get(voice)
        pieces = self.pieces(text, language)
        if not pieces:
            raise DataError("input: no speakable text (after normalisation nothing is left); give words to say")
        for i, piece in enumerate(pieces):
            try:
                result = self.synthesize_piece(piece, chosen, language=language, speed=speed, cancel=cancel)
            except SynthesisCancelled:
                self.stats.cancelled += 1
                self.stats.note(f"cancelled: caller went away during piece {i + 1}/{len(pieces)}")
                return
            yield result.audio

    def synthesize_all(self, text: str, voice: str, **kwargs) -> np.ndarray:
        """The whole text as one float32 array (the chunks of :meth:`synthesize` joined)."""
        chunks = list(self.synthesize(text, voice, **kwargs))
        return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32)
