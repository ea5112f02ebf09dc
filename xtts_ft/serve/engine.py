"""The one synthesis engine: the HTTP server, the Wyoming server and the web app's Speak tab all use it.

It is the evaluation's synthesis, kept loaded: the model comes from the project's loaders
(``xtts_ft.inference.loading`` via :mod:`.model_source`), the text goes through the model's own
tokenizer and normaliser (the export's recorded text settings: numbers read as words, as in
training); the caller's cancel callback is asked while its codes or its vocoder turn are awaited and
before each chunk, so a client that goes away leaves the batch at the next decode step and its synthesis
ends within one vocoder call (a chunk holds at most ``stream_chunk_codes`` codes).

Long text is split (:mod:`.text_pieces`) at sentence and clause marks into pieces that fit the
character and token limits. One model serves everyone through one decode thread
(:mod:`.decode_loop`, continuous batching): each piece is a row of the GPT's batch from the step
after it arrives until its stop code, with its own seed and generator, so its codes are the ones it
would get alone. Each piece is streamed: the first ``stream_first_chunk_codes`` codes are vocoded and
sent at once, then chunks twice as long each time up to ``stream_chunk_codes`` (:mod:`xtts_ft.inference.streaming_vocoder`:
each stretch of audio vocoded once). Alone, the engine's codes are exactly those of coqui's ``Xtts.inference`` for the same
seed: the decoder's against coqui's in tests/inference/test_batch_decode.py (golden codes in tests/assets/), the decode
loop's batched rows against each one's solo codes in tests/serve/test_engine_streaming.py.

Short-text mitigation (short inputs are where fine-tuned XTTS babbles):

1. fixed sampling per request: every piece is generated from ``ServeConfig.seed`` with the
   evaluation's temperature, so a text says the same every time;
2. a length cap per piece: generation stops at ``len(piece) * max_seconds_per_char + min_piece_s``
   seconds of codes instead of the model's ~40 s limit, so a piece that misses the stop token
   cannot babble on;
3. a plausibility retry: a short piece (``short_text_chars``) that hit its cap without the stop
   token is generated again with the next seed (``short_text_retries`` times); the first that
   stops is kept (such a piece is decoded whole before its audio is sent: whether it stopped is only
   known at its end);
4. very short sentences inside a longer text are joined to a neighbour before synthesis.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, ContextManager, Generator, Iterator, Optional

import numpy as np
import numpy.typing as npt
import torch
import torch.nn.functional as F

from xtts_ft.config import EvaluationConfig, RunConfig, ServeConfig
from xtts_ft.errors import DataError
from xtts_ft.inference.batch_decode import DecodeRequest, Sampling, prefix_embeddings
from xtts_ft.inference.conditioning import Latents, check_language, conditioning
from xtts_ft.inference.decode_cache import host_to_device
from xtts_ft.inference.decode_graph import side_stream
from xtts_ft.inference.decoder_settings import DecoderSettings, decoder_settings
from xtts_ft.inference.streaming_vocoder import StreamingVocoder, Window, fold_weight_norm, vocode_windows, windows_fit
from xtts_ft.serve.decode_loop import DecodeLoop, Stream
from xtts_ft.serve.first_chunk import FirstChunkLog, FirstChunkTimes
from xtts_ft.serve.model_source import ResolvedModel
from xtts_ft.serve.text_pieces import split_pieces
from xtts_ft.serve.vocoder_turns import VocoderTurns
from xtts_ft.serve.voices import Voice, VoiceLibrary, run_speaker_clips

if TYPE_CHECKING:
    from TTS.tts.models.xtts import Xtts

    from xtts_ft.json_types import JsonObject
    from xtts_ft.tokenizer import AmharicTokenizer

log = logging.getLogger(__name__)

Cancel = Callable[[], bool]  # True: the caller no longer wants the audio


class SynthesisCancelled(BaseException):
    """Raised in the caller's thread when the cancel callback says so: by :meth:`SpeechEngine._codes` before each
    chunk and while codes are awaited (every 50 ms), and while a vocoder turn is awaited; never inside a model call
    (a vocoder call under way finishes first; the decode loop drops the row at its next step). A BaseException
    (like the training stop) so no ``except Exception`` on the way swallows it."""


def _check(cancel: Optional[Cancel]) -> None:
    """Raise :class:`SynthesisCancelled` when the caller no longer wants the audio (asked while codes are awaited,
    before each chunk and while a vocoder turn is awaited)."""
    if cancel is not None and cancel():
        raise SynthesisCancelled()


def _waiting_check(cancel: Optional[Cancel]) -> Optional[Callable[[], None]]:
    """What a vocoder turn asks while it waits (:meth:`VocoderTurns.vocode`'s ``abandon``): None without a cancel."""
    return None if cancel is None else functools.partial(_check, cancel)


@dataclass
class EngineStats:
    """Counters a server shows on /health (and tests read)."""

    pieces: int = 0
    cancelled: int = 0  # syntheses abandoned because their caller went away
    retries: int = 0  # short pieces generated again (mitigation step 3)
    capped: int = 0  # pieces that reached their length cap without the stop token (after retries)
    synthesis_s: float = 0.0  # wall time from a piece's submission to its last audio (pieces overlap)
    audio_s: float = 0.0
    first_audio_s: float = 0.0  # the latest piece's time from submission to its first audio
    first_chunks: FirstChunkLog = field(default_factory=FirstChunkLog, repr=False, compare=False)  # where it went
    events: list[str] = field(default_factory=list)  # the last few notable events, newest last
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def note(self, line: str) -> None:
        with self.lock:
            self.events = (self.events + [line])[-20:]
        log.info("%s", line)


@dataclass(frozen=True)
class PieceResult:
    audio: npt.NDArray[np.float32]  # float32, mono, at SpeechEngine.sample_rate
    ended_with_stop: bool
    n_codes: int
    cap: int
    attempts: int


def new_vocoder_stream(device: torch.device, decoder: DecoderSettings) -> Optional[torch.cuda.Stream]:
    """The CUDA stream the readers vocode on (``decoder.vocoder_stream``: ``ServeConfig.vocoder_stream`` auto, on
    CUDA; None: the decode steps' stream): never the one the decode graphs are recorded on
    (:func:`xtts_ft.inference.decode_graph.side_stream`)."""
    return side_stream(device) if decoder.vocoder_stream else None


class SpeechEngine:
    """A loaded model with its voices. Build with :meth:`open`."""

    def __init__(self, xtts: Xtts, tokenizer: AmharicTokenizer, meta: JsonObject, source: ResolvedModel, voices: VoiceLibrary, *,
                 settings: ServeConfig, temperature: float, max_codes: Optional[int] = None,
                 loop: Optional[DecodeLoop] = None) -> None:
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
        self.sampling = Sampling(temperature=temperature)  # Xtts.inference's settings, the evaluation's temperature
        self.stats = EngineStats()
        check_language(tokenizer, self.language)
        xtts.tokenizer = tokenizer
        xtts.train(False)  # serving only: dropout off for good
        fold_weight_norm(xtts.hifigan_decoder)  # and HiFiGAN's weights computed once, not at every call
        device = next(xtts.parameters()).device
        self.device = device  # where the model runs
        # How the decoder runs, decided once from the device and the settings: fp32 unless asked for, CUDA graphs,
        # overlapped steps and a vocoder stream on a card unless turned off; half precision and all those on CUDA only
        self.decoding = decoder_settings(device, settings)
        for note in self.decoding.notes:
            log.info("engine: %s", note)
        # One decode thread per model: engines that share a model (tests, benchmarks) share its loop.
        self.loop = loop or DecodeLoop(xtts.gpt, settings.max_active_streams, self.decoding)
        # One vocoder call at a time (one chunk, never across a piece), the most urgent first: callers' threads
        # running HiFiGAN side by side only fight over the same cores (measured: 8 at once gave 0.4x the throughput).
        # On CUDA the call whose turn it is also vocodes other callers' waiting chunks (ServeConfig.vocoder_batch).
        self.vocoder_turns: VocoderTurns[Window, torch.Tensor] = VocoderTurns(
            self.decoding.vocoder_batch,
            run=lambda windows: vocode_windows(xtts.hifigan_decoder, windows), fits=windows_fit)
        # On CUDA the vocoding (a chunk's frames, HiFiGAN, the crossfade) goes on a stream of its own: on the decode
        # loop's stream a chunk's kernels wait behind the steps queued before them, and the next step behind the
        # chunk. Reading the latents there needs no wait on the loop's stream: the loop has read each step's codes
        # back (a synchronisation) before a reader sees them, and a reader holds its latents until its audio is on
        # the host (another one).
        self.vocoder_stream = new_vocoder_stream(device, self.decoding)

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

    def forget_stats(self) -> None:
        """Start the counters again (after the warm-up: its audio is not a caller's)."""
        self.stats = EngineStats()

    def close(self) -> None:
        """Stop the decode thread (requests still running end with an error)."""
        self.loop.close()

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

    # --- decoding ----------------------------------------------------------------------------
    def decode_request(self, piece: str, language: str, gpt_cond_latent: torch.Tensor, seed: int,
                       max_codes: int) -> DecodeRequest:
        """The decoding of ``piece`` as ``Xtts.inference`` would do it (its text handling, this engine's sampling)."""
        device = gpt_cond_latent.device
        tokens = torch.IntTensor(self.tokenizer.encode(piece.strip().lower(), lang=language)).unsqueeze(0)
        tokens = host_to_device(tokens, device)  # on a card without waiting for the decode step in flight
        with torch.inference_mode():
            prefix = prefix_embeddings(self.xtts.gpt, gpt_cond_latent, tokens)
        return DecodeRequest(prefix, max_codes, self.sampling, seed)

    def _latents(self, voice: Voice) -> Latents:
        with torch.inference_mode():
            return self.voices.latents(voice, lambda path: conditioning(self.xtts, path))

    def _codes(self, stream: Stream, cancel: Optional[Cancel], every: int,
               first: int) -> Generator[tuple[int, bool], None, None]:
        """Yield (codes, final) each time the next chunk's codes exist, and once at the end (final True: ``codes`` is
        every code the piece has). Chunks double from ``first`` codes up to ``every`` (10, 20, 40, 40, ... by
        default): the first chunk's audio (10 codes: 0.25 s kept, the rest held back as the next window's context)
        must last until the second chunk's codes are decoded, which at 40 codes took 0.3-0.5 s at 8-32 callers on an
        H200 (7.6-13.4 ms a step): a silent gap after the first word. At 20 codes the second chunk fits in the first
        one's audio up to about 12 ms a step.

        Every chunk holds at most its size, however many codes exist when the reader looks (a piece decoded ahead,
        or one that decoded on while its reader vocoded, is cut into the same chunks; a reader that fell behind takes
        them one after another without waiting). So one vocoder call never grows with the piece (a hang-up or a stop
        is noticed between calls of bounded length), and where a piece's joins fall depends on its length only, not
        on timing: the same request gives the same audio. ``final`` comes with the count (:meth:`Stream.progress`),
        never from a later look: a piece that ended after the count was taken is not vocoded as if it ended there.
        ``cancel`` is asked before every chunk and at least every 50 ms while codes are awaited."""
        given, size = 0, first
        try:
            while True:
                _check(cancel)
                stream.wait(given + size - 1, timeout=0.05)
                have, finished = stream.progress()
                if have >= given + size:  # a whole chunk (the codes after it, if any, are the next chunk's)
                    given += size
                    final = finished and have == given
                    yield given, final
                    if final:
                        return
                    size = min(every, 2 * size)
                elif finished:
                    yield have, True
                    return
        finally:
            if not stream.finished:
                stream.cancel()

    def _vocode_whole(self, latents: list[torch.Tensor], speaker_embedding: torch.Tensor, speed: float,
                      needed_at: Optional[float] = None, cancel: Optional[Cancel] = None) -> npt.NDArray[np.float32]:
        """HiFiGAN over a whole piece, as ``Xtts.inference`` does it (``speed`` stretches the latents); ``needed_at``:
        when its listener runs out of audio (default now: nothing is playing). ``cancel`` is asked while the turn is
        awaited (the call itself, one piece of at most its cap, runs to its end)."""
        with torch.inference_mode(), self.on_vocoder_stream():  # all of it: HiFiGAN reads what the stack makes
            gpt_latents = torch.stack(latents)[None]
            length_scale = 1.0 / max(speed, 0.05)
            if length_scale != 1.0:
                gpt_latents = F.interpolate(gpt_latents.transpose(1, 2), scale_factor=length_scale,
                                            mode="linear").transpose(1, 2)
            deadline = time.perf_counter() if needed_at is None else needed_at
            with self.vocoder_turns.turn(deadline, abandon=_waiting_check(cancel)), self.decoding.vocoding():
                wav = self.xtts.hifigan_decoder(gpt_latents, g=speaker_embedding)
            return wav.detach().float().cpu().numpy().reshape(-1)  # (on the host: the stream's work is done)

    def on_vocoder_stream(self) -> ContextManager[object]:
        """Around a reader's vocoding: the engine's vocoder stream (CUDA, ``ServeConfig.vocoder_stream``), if any."""
        if self.vocoder_stream is None:
            return contextlib.nullcontext()
        on_stream: ContextManager[object] = torch.cuda.stream(self.vocoder_stream)
        return on_stream

    def _decode_whole(self, piece: str, language: str, latents: Latents, seed: int, cap: int,
                      cancel: Optional[Cancel]) -> DecodeRequest:
        request = self.decode_request(piece, language, latents[0], seed, cap)
        for _ in self._codes(self.loop.submit(request), cancel, every=cap + 1, first=cap + 1):
            pass
        return request

    def _count(self, ended: bool, started: float, audio_samples: int) -> None:
        with self.stats.lock:
            self.stats.pieces += 1
            self.stats.capped += 0 if ended else 1
            self.stats.synthesis_s += time.perf_counter() - started
            self.stats.audio_s += audio_samples / self.sample_rate

    # --- synthesis ---------------------------------------------------------------------------
    def synthesize_piece(self, piece: str, voice: Voice, *, language: Optional[str] = None, speed: float = 1.0,
                         cancel: Optional[Cancel] = None, needed_at: Optional[float] = None) -> PieceResult:
        """One piece (already normalised and within the limits), whole, with the short-text mitigation.
        ``needed_at``: when its listener runs out of audio (the vocoder's priority; default: now)."""
        language = language or self.language
        cap = self.piece_cap(piece)
        short = len(piece) <= self.settings.short_text_chars
        attempts = 1 + (self.settings.short_text_retries if short else 0)
        start = time.perf_counter()
        latents = self._latents(voice)
        kept: Optional[DecodeRequest] = None
        for attempt in range(attempts):
            request = self._decode_whole(piece, language, latents, self.settings.seed + attempt, cap, cancel)
            if kept is None or request.ended_with_stop:  # the first attempt, or the first that stopped
                kept = request
            if request.ended_with_stop:
                break
            if attempt + 1 < attempts:
                with self.stats.lock:
                    self.stats.retries += 1
        assert kept is not None  # attempts >= 1: the first attempt is always kept
        audio = self._vocode_whole(kept.latents, latents[1], speed, needed_at, cancel)
        self._count(kept.ended_with_stop, start, audio.size)
        return PieceResult(audio, kept.ended_with_stop, len(kept.codes), cap, attempt + 1)

    def _streams(self, piece: str, speed: float) -> bool:
        """Whether ``piece`` is streamed (else synthesised whole: a short piece that may be retried, or a speed)."""
        return speed == 1.0 and not (len(piece) <= self.settings.short_text_chars and self.settings.short_text_retries)

    def _submit(self, piece: str, voice: Voice, language: str) -> tuple[DecodeRequest, Stream, float]:
        request = self.decode_request(piece, language, self._latents(voice)[0], self.settings.seed,
                                      self.piece_cap(piece))
        return request, self.loop.submit(request), time.perf_counter()

    def stream_piece(self, piece: str, voice: Voice, *, language: Optional[str] = None, speed: float = 1.0,
                     cancel: Optional[Cancel] = None, submitted: Optional[tuple[DecodeRequest, Stream, float]] = None,
                     needed_at: Optional[float] = None, began: Optional[float] = None) -> Iterator[npt.NDArray[np.float32]]:
        """One piece as float32 chunks: the first after ``stream_first_chunk_codes`` codes, then chunks of twice as
        many codes each time up to ``stream_chunk_codes`` (:meth:`_codes`). A short piece that may be retried, or
        ``speed`` other than 1, is synthesised whole (one chunk). ``submitted``: its decoding, already started
        (:meth:`synthesize` starts the next piece's while this one is spoken). ``needed_at``: when the listener runs
        out of the audio before this piece (default: now); each chunk's vocoding waits its turn by when its listener
        needs it. ``began``: when the text this piece starts began (its first chunk's times then include ``prepare``:
        ``stats.first_chunks``)."""
        language = language or self.language
        if not self._streams(piece, speed):
            yield self.synthesize_piece(piece, voice, language=language, speed=speed, cancel=cancel,
                                        needed_at=needed_at).audio
            return
        request, stream, start = submitted or self._submit(piece, voice, language)
        needed_at = time.perf_counter() if needed_at is None else needed_at
        vocoder = StreamingVocoder(self.xtts.hifigan_decoder, self._latents(voice)[1])
        given, samples = 0, 0
        # closed when the loop ends early (cancelled, failed): the piece leaves the batch now, not when collected
        with contextlib.closing(self._codes(stream, cancel, self.settings.stream_chunk_codes,
                                            self.settings.stream_first_chunk_codes)) as chunks:
            for have, final in chunks:
                read = time.perf_counter()
                vocoder.add(request.latents[given:have])
                given = have
                with torch.inference_mode(), self.on_vocoder_stream():
                    plan = vocoder.plan(final=final)
                    if isinstance(plan, np.ndarray):  # nothing to vocode (yet)
                        chunk, vocoded = plan, time.perf_counter()
                    else:  # in this caller's vocoder turn, or with another caller's chunk in its turn
                        with self.decoding.vocoding():
                            wav = self.vocoder_turns.vocode(needed_at + samples / self.sample_rate, plan,
                                                            abandon=_waiting_check(cancel))
                        vocoded = time.perf_counter()
                        chunk = vocoder.finish(plan, wav)
                if chunk.size:
                    if not samples:
                        handed = time.perf_counter()
                        self.stats.first_chunks.add(FirstChunkTimes.from_moments(
                            began=began, submitted=start, code_times=stream.code_times[:have], first_codes=have,
                            read=read, vocoded=vocoded, handed=handed))
                        with self.stats.lock:
                            self.stats.first_audio_s = handed - start
                    samples += chunk.size
                    yield chunk
        self._count(request.ended_with_stop, start, samples)

    def synthesize(self, text: str, voice: str, *, language: Optional[str] = None, speed: float = 1.0,
                   cancel: Optional[Cancel] = None) -> Iterator[npt.NDArray[np.float32]]:
        """Float32 audio chunks (at :attr:`sample_rate`) as they are ready, piece after piece.

        The next piece's decoding starts when this piece's first audio is ready (one piece ahead, so a long
        text holds at most two rows of the batch, and a new caller's first piece does not share the batch with
        the second pieces of callers who have not heard anything yet), so its first audio is ready when this
        piece's last has been sent. The vocoder serves the caller whose listener runs out of audio soonest
        first (:mod:`.vocoder_turns`; a first chunk is always due).
        ``cancel`` is asked while codes or a vocoder turn are awaited (at least every 50 ms) and before each chunk;
        when it returns True the request leaves the decode batch at its next step and the generator ends early,
        within the vocoder call under way if any (counted in ``stats.cancelled``). Raises ``DataError`` for empty
        text and ``VoiceError`` for an unknown voice before anything is synthesised.
        """
        language = language or self.language
        check_language(self.tokenizer, language)
        chosen = self.voices.get(voice)
        pieces = self.pieces(text, language)
        if not pieces:
            raise DataError("input: no speakable text (after normalisation nothing is left); give words to say")
        ahead = None  # the next piece's decoding, started early
        started, sent = time.perf_counter(), 0  # the listener runs out of audio at started + sent samples
        try:
            for i, piece in enumerate(pieces):
                current, ahead = ahead, None
                following = pieces[i + 1] if i + 1 < len(pieces) and self._streams(pieces[i + 1], speed) else None
                try:
                    for chunk in self.stream_piece(piece, chosen, language=language, speed=speed, cancel=cancel,
                                                   submitted=current, needed_at=started + sent / self.sample_rate,
                                                   began=started if i == 0 else None):
                        if following is not None and ahead is None:
                            ahead = self._submit(following, chosen, language)  # this piece's first audio is ready
                        sent += chunk.size
                        yield chunk
                    if following is not None and ahead is None:  # (this piece gave no audio)
                        ahead = self._submit(following, chosen, language)
                except SynthesisCancelled:
                    with self.stats.lock:
                        self.stats.cancelled += 1
                    self.stats.note(f"cancelled: caller went away during piece {i + 1}/{len(pieces)}")
                    return
        finally:
            if ahead is not None and not ahead[1].finished:
                ahead[1].cancel()  # ended early (cancelled, failed, or the caller stopped reading)

    def synthesize_all(self, text: str, voice: str, *, language: Optional[str] = None, speed: float = 1.0,
                       cancel: Optional[Cancel] = None) -> npt.NDArray[np.float32]:
        """The whole text as one float32 array (the chunks of :meth:`synthesize` joined)."""
        chunks = list(self.synthesize(text, voice, language=language, speed=speed, cancel=cancel))
        return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32)
