"""The engine streams each piece from its first codes, through one decode loop shared by all requests."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch

from tests.serve.servehelpers import engine_like, speak_at_once
from xtts_ft.inference.batch_decode import DecodeRequest, Sampling, decode_all

PIECE = "ዛሬ የአየሩ ሁኔታ በጣም ጥሩ ነው"  # longer than short_text_chars: streamed


@dataclass(frozen=True)
class Gated(Sampling):
    """Sampling that holds the decode loop before choosing code number ``hold_at + 1`` until ``gate`` is set
    (the test's request decodes alone: one row per call)."""

    hold_at: int = 10
    gate: threading.Event = field(default_factory=threading.Event, compare=False)
    calls: list = field(default_factory=list, compare=False)

    def choose(self, scores, seen, generators):
        self.calls.append(len(generators))
        if len(self.calls) > self.hold_at:
            assert self.gate.wait(60), "the test never opened the gate"
        return super().choose(scores, seen, generators)


def _solo_codes(engine, requests: list[DecodeRequest]) -> list[list[int]]:
    """Each request's codes decoded alone (the oracle of the batched loop)."""
    for r in requests:
        with torch.inference_mode():
            decode_all(engine.xtts.gpt, [r])
    return [r.codes for r in requests]


def test_first_chunk_is_sent_after_the_first_chunk_codes(engine):
    """The first chunk comes while the decoder is held before its code number ``first_codes + 1``; the rest follow,
    and together they are the whole piece's audio. (How many chunks follow depends on how far the decoder got
    meanwhile: the tiny GPT may finish the piece before the reader looks again; the chunk sizes themselves are
    test_chunks_double_from_the_first_up_to_the_chunk_codes'.)"""
    first_codes = 6
    streaming = engine_like(engine, stream_first_chunk_codes=first_codes, stream_chunk_codes=5)
    gated = Gated(temperature=engine.temperature, hold_at=first_codes)
    streaming.sampling = gated
    voice = engine.voices.get("spk1")
    request, stream, start = streaming._submit(PIECE, voice, engine.language)
    chunks = streaming.stream_piece(PIECE, voice, submitted=(request, stream, start))
    try:
        first = next(chunks)  # arrives while the decoder is held after `first_codes` codes
        assert len(request.codes) == first_codes and first.size > 0
    finally:
        gated.gate.set()
    rest = list(chunks)
    assert rest and all(c.size for c in rest) and len(request.codes) > first_codes
    whole = streaming.synthesize_piece(PIECE, voice)
    joined = np.concatenate([first, *rest])
    assert joined.size == whole.audio.size
    assert np.abs(joined - whole.audio).max() <= 1e-3 * np.abs(whole.audio).max()


def test_streamed_piece_is_the_whole_piece(engine):
    voice = engine.voices.get("spk1")
    streamed = list(engine.stream_piece(PIECE, voice))
    whole = engine.synthesize_piece(PIECE, voice)
    # the first chunk is cut at its codes however fast the piece decoded: there are always two or more
    assert whole.n_codes > engine.settings.stream_first_chunk_codes
    assert len(streamed) >= 2, "a first chunk and at least one more"
    joined = np.concatenate(streamed)
    assert joined.size == whole.audio.size
    assert np.abs(joined - whole.audio).max() <= 1e-3 * np.abs(whole.audio).max()


def test_concurrent_requests_are_batched_and_keep_their_solo_codes(engine):
    """8 requests through the decode loop at once (CPU fp32, sampling): each gives exactly its solo codes."""
    gpt_cond_latent, _speaker = engine._latents(engine.voices.get("spk1"))
    texts = ["ሰላም", "ዛሬ የአየሩ ሁኔታ", "ኢትዮጵያ ጥንታዊ ሀገር ናት", "ጥሩ", "በጣም ጥሩ ነው", "ሀ", "ተማሪዎች", "አምስት ሺህ"]
    cap = engine.max_codes

    def request(i: int) -> DecodeRequest:
        return engine.decode_request(texts[i], engine.language, gpt_cond_latent, seed=i, max_codes=cap - i)

    solo = _solo_codes(engine, [request(i) for i in range(len(texts))])
    batched = [request(i) for i in range(len(texts))]
    engine.loop.largest_batch, before = 0, engine.loop.steps
    streams = [engine.loop.submit(r) for r in batched]
    for stream in streams:
        while not stream.finished:
            stream.wait(stream.produced, timeout=1.0)
    assert [r.codes for r in batched] == solo
    assert engine.loop.largest_batch >= 4 and engine.loop.steps - before < sum(len(c) for c in solo), "batched"
    assert engine.loop.active == 0


def test_the_next_piece_decodes_while_this_one_is_spoken(engine, monkeypatch):
    """One piece ahead: the second piece is submitted once the first's first audio is ready and before it is sent;
    the audio is each piece's own."""
    text = "ዛሬ የአየሩ ሁኔታ በጣም ጥሩ ነው። ኢትዮጵያ በምሥራቅ አፍሪካ የምትገኝ ሀገር ናት።"
    pieces = engine.pieces(text)
    assert len(pieces) == 2
    events: list[str] = []
    submitted: list = []
    seen_at_second_submit: list[int] = []  # codes the first piece had when the second was submitted
    submit = engine.loop.submit

    def recording_submit(request):
        events.append("submit")
        if submitted:
            seen_at_second_submit.append(len(submitted[0].codes))
        submitted.append(request)
        return submit(request)

    monkeypatch.setattr(engine.loop, "submit", recording_submit)
    chunks = []
    for chunk in engine.synthesize(text, "spk1"):
        events.append("chunk")
        chunks.append(chunk)
    monkeypatch.undo()
    assert events[:3] == ["submit", "submit", "chunk"] and events.count("submit") == 2
    # ... and not before its first audio was ready: the second piece joined after the first had its first chunk's codes
    assert seen_at_second_submit and seen_at_second_submit[0] >= engine.settings.stream_first_chunk_codes
    whole = np.concatenate([engine.synthesize_piece(p, engine.voices.get("spk1")).audio for p in pieces])
    streamed = np.concatenate(chunks)
    assert streamed.size == whole.size
    assert np.abs(streamed - whole).max() <= 1e-3 * np.abs(whole).max()
    assert engine.loop.active == 0


def test_callers_chunks_vocoded_in_one_call_are_each_callers_own_audio(engine):
    """The vocoder's turns with batches (CUDA's setting; the CPU keeps one chunk per call): three callers at once,
    their chunks gathered into shared calls, each caller's audio is what it gets alone."""
    import time

    from xtts_ft.inference.streaming_vocoder import vocode_windows, windows_fit
    from xtts_ft.serve.vocoder_turns import VocoderTurns

    texts = ["ዛሬ የአየሩ ሁኔታ በጣም ጥሩ ነው", "ኢትዮጵያ በምሥራቅ አፍሪካ የምትገኝ ሀገር ናት", "ተማሪዎች ትምህርት ቤት ሄዱ ዛሬ"]
    alone = [engine.synthesize_all(t, "spk1") for t in texts]
    batching = engine_like(engine)
    hifigan = engine.xtts.hifigan_decoder
    calls: list[int] = []

    def run(windows):
        calls.append(len(windows))
        if len(calls) == 1:
            time.sleep(0.5)  # the first call is slow: the other callers' first chunks wait behind it
        return vocode_windows(hifigan, windows)

    batching.vocoder_turns = VocoderTurns(8, run=run, fits=windows_fit)
    results = speak_at_once(batching, texts)
    assert max(calls) >= 2 and sum(calls) > len(calls), f"chunks shared calls: {calls}"
    for i, mine in enumerate(alone):
        assert results[i].size == mine.size
        assert np.abs(results[i] - mine).max() <= 1e-4 * np.abs(mine).max(), texts[i]
    assert engine.loop.active == 0


@dataclass(frozen=True)
class Slow(Sampling):
    """Sampling that takes ``pause`` seconds longer for each choice (one per code: the prefill's, then each step's)."""

    pause: float = 0.03

    def choose(self, scores, seen, generators):
        time.sleep(self.pause)
        return super().choose(scores, seen, generators)


def test_the_first_chunks_time_is_split_into_the_parts_where_it_was_spent(engine):
    """A slower choice of each code shows in the parts before and during decoding, a slower HiFiGAN in vocoding; the
    parts add up to the time from submission to the chunk handed on; only a text's first piece counts prepare."""
    from xtts_ft.serve.first_chunk import PARTS, describe

    first_codes, pause, vocoder_pause = 5, 0.03, 0.2
    streaming = engine_like(engine, stream_first_chunk_codes=first_codes, stream_chunk_codes=5)
    streaming.sampling = Slow(temperature=engine.temperature, pause=pause)
    run = streaming.vocoder_turns._run

    def slow_run(items):
        time.sleep(vocoder_pause)
        return run(items)

    streaming.vocoder_turns._run = slow_run
    text = f"{PIECE}። {PIECE}።"
    assert len(streaming.pieces(text)) == 2
    begin = time.perf_counter()
    chunks = streaming.synthesize(text, "spk1")
    next(chunks)
    heard = time.perf_counter() - begin
    list(chunks)
    records = list(streaming.stats.first_chunks.records)
    assert [r.opens_text for r in records] == [True, False]
    opening, following = records
    assert all(getattr(r, name) >= 0 for r in records for name in PARTS)
    assert opening.prepare > 0 and following.prepare == 0
    assert opening.to_first_code >= pause  # the prefill's choice
    assert opening.decoding >= (first_codes - 1) * pause  # the chunk's other codes, one step each
    assert opening.vocoding >= vocoder_pause and opening.handoff < vocoder_pause and opening.finish < vocoder_pause
    assert opening.total <= heard  # everything from the text's start to the chunk handed on, nothing twice
    assert opening.total >= first_codes * pause + vocoder_pause
    line = describe(streaming.stats.first_chunks.medians())
    assert line.startswith("first chunk, median ms: prepare ") and f"(total {1000 * opening.total:.0f})" in line


class CountingStream:
    """A stream whose codes exist as soon as its reader asks for them, ending after ``total``."""

    def __init__(self, total: int) -> None:
        self.total, self.produced, self.finished = total, 0, False

    def wait(self, have: int, timeout: float) -> int:
        self.produced = min(self.total, have + 1)
        self.finished = self.produced == self.total
        return self.produced

    def progress(self) -> tuple[int, bool]:
        return self.produced, self.finished

    def cancel(self) -> None:
        raise AssertionError("a stream read to its end is not cancelled")


@pytest.mark.parametrize("first,every,chunks", [
    (10, 40, [10, 30, 70, 110, 150, 190, 200]),  # serve's defaults: 10, 20, then 40 codes a chunk
    (6, 5, [6, 11, 16, 21]),  # a later chunk smaller than the first: that size from the start
    (4, 40, [4, 12, 28, 60, 100, 140, 180, 200]),
])
def test_chunks_double_from_the_first_up_to_the_chunk_codes(engine, first, every, chunks):
    """The second chunk must be ready before the first one's audio (0.25 s from 10 codes) runs out: 20 codes after
    it, not 40 (at 13 ms a step, 32 callers on an H200, 40 codes left a 0.3 s silence after the first word)."""
    total = chunks[-1]
    got = list(engine._codes(CountingStream(total), None, every=every, first=first))
    assert got == [(count, count == total) for count in chunks]


class DecodedStream:
    """A stream that has all its ``total`` codes and has ended before its reader first looks (a piece decoded ahead,
    while the one before it was spoken); or, with ``ends_after_reads``, one that ends (with ``total`` codes) in the
    moment after its reader has taken its progress that many times: between the count and its vocoding."""

    def __init__(self, total: int, ends_after_reads: int = 0, produced: int = 0) -> None:
        self.total, self.ends_after_reads, self.reads = total, ends_after_reads, 0
        self.produced = total if not ends_after_reads else produced
        self.finished = not ends_after_reads

    def progress(self) -> tuple[int, bool]:
        seen = self.produced, self.finished
        self.reads += 1
        if self.reads == self.ends_after_reads:
            self.produced, self.finished = self.total, True
        return seen

    def wait(self, have: int, timeout: float) -> int:
        return self.produced

    def cancel(self) -> None:
        raise AssertionError("a stream read to its end is not cancelled")


def test_a_piece_decoded_before_its_reader_looks_still_sends_its_first_chunk_first(engine):
    """The first chunk is the first ``first`` codes even when the whole piece exists already: its audio then needs
    one short vocoder call, not one over the whole piece (the test that streamed a piece found one chunk when the
    tiny GPT had decoded all of it before its reader looked)."""
    assert list(engine._codes(DecodedStream(25), None, every=40, first=10)) == [(10, False), (25, True)]
    assert list(engine._codes(DecodedStream(10), None, every=40, first=10)) == [(10, True)]
    assert list(engine._codes(DecodedStream(7), None, every=40, first=10)) == [(7, True)]


def test_a_piece_that_ends_after_its_count_was_read_is_not_vocoded_as_ended(engine):
    """A chunk is final only when the stream had ended when its count was read: a piece whose last codes came
    right after (the loop runs on meanwhile) gets them in more chunks; the reader once asked the stream again
    after the count, and vocoded the first codes as the piece's end, without its last ones' context."""
    stream = DecodedStream(50, ends_after_reads=1, produced=12)  # ends as soon as the reader has looked once
    assert list(engine._codes(stream, None, every=40, first=10)) == [(10, False), (30, False), (50, True)]
    stream = DecodedStream(50, ends_after_reads=2, produced=12)  # ends right after the reader's second look
    assert list(engine._codes(stream, None, every=40, first=10)) == [(10, False), (30, False), (50, True)]


def test_a_reader_that_fell_behind_still_takes_chunks_of_at_most_the_chunk_codes(engine):
    """``--stream-chunk-codes`` is the most codes a later chunk holds, however many the decoder has made by the time
    its reader looks: a piece decoded whole (ahead, or while the reader waited for the vocoder) is cut exactly as one
    read as it decoded. The second chunk used to take every code there was: on a CPU 5.4 s of audio in one call, a
    hang-up or a stop unnoticed until it ended, and joins that moved with the load."""
    assert list(engine._codes(DecodedStream(135), None, every=40, first=10)) == [
        (10, False), (30, False), (70, False), (110, False), (135, True)]
    assert list(engine._codes(DecodedStream(135), None, every=40, first=10)) == list(
        engine._codes(CountingStream(135), None, every=40, first=10))
    assert list(engine._codes(DecodedStream(23), None, every=5, first=6)) == [
        (6, False), (11, False), (16, False), (21, False), (23, True)]


def test_a_piece_that_ends_while_its_first_chunk_is_counted_streams_as_the_whole_piece(engine):
    """The same race through the engine: the piece's stream says it has 12 codes and has not ended, and has ended
    with all of them the moment after: the audio is still the whole piece's (vocoding the first codes as the end
    left them without the context of the codes after, and the join without its crossfade)."""
    voice = engine.voices.get("spk1")
    request, stream, start = engine._submit(PIECE, voice, engine.language)
    while not stream.finished:
        stream.wait(stream.produced, timeout=1.0)
    total = len(request.codes)
    assert total > 12
    racing = DecodedStream(total, ends_after_reads=1, produced=12)
    racing.code_times = stream.code_times
    streamed = list(engine.stream_piece(PIECE, voice, submitted=(request, racing, start)))
    whole = engine.synthesize_piece(PIECE, voice)
    joined = np.concatenate(streamed)
    assert len(streamed) >= 2 and joined.size == whole.audio.size
    assert np.abs(joined - whole.audio).max() <= 1e-3 * np.abs(whole.audio).max()


def test_a_piece_decoded_ahead_streams_as_the_whole_piece(engine):
    """A piece whose decoding ended before it was read (submitted ahead) comes as a first chunk and more, and its
    audio is the whole piece's."""
    voice = engine.voices.get("spk1")
    submitted = engine._submit(PIECE, voice, engine.language)
    while not submitted[1].finished:
        submitted[1].wait(submitted[1].produced, timeout=1.0)
    streamed = list(engine.stream_piece(PIECE, voice, submitted=submitted))
    whole = engine.synthesize_piece(PIECE, voice)
    assert len(submitted[0].codes) > engine.settings.stream_first_chunk_codes
    assert len(streamed) >= 2
    joined = np.concatenate(streamed)
    assert joined.size == whole.audio.size
    assert np.abs(joined - whole.audio).max() <= 1e-3 * np.abs(whole.audio).max()


def test_a_reader_is_woken_when_its_chunk_is_ready_not_at_every_code(engine):
    """The decode loop wakes a stream's reader when the codes it waits for exist (or the stream ends), not after
    every step: with 32 callers, each step had woken 32 threads that found nothing to do."""
    streaming = engine_like(engine, stream_first_chunk_codes=4, stream_chunk_codes=8)
    request, stream, _ = streaming._submit(PIECE, engine.voices.get("spk1"), engine.language)
    counts = [count for count, _final in streaming._codes(stream, None, every=8, first=4)]
    assert counts[0] == 4 and counts[-1] == len(request.codes) > 12  # a first chunk, later chunks, the end
    # woken once per chunk it waited for at most (and maybe by the end), never once per code
    assert stream.wakeups <= len(counts) + 1 < len(request.codes)


def test_a_loop_with_graphs_replays_its_steps_and_prefills_and_keeps_the_solo_codes(engine):
    """The loop serve runs on a card (``decode_graphs``): its decoder steps, their heads and its prefills through
    fixed shapes (here with recorders that record nothing, no GPU), reports them, and each request still gets its
    solo codes."""
    from xtts_ft.inference.decode_graph import call_directly
    from xtts_ft.inference.decoder_settings import DecoderSettings
    from xtts_ft.serve.decode_loop import DecodeLoop

    loop = DecodeLoop(engine.xtts.gpt, max_active=4, settings=DecoderSettings(graphs=True, record=call_directly))
    parts = loop._decoder.parts
    assert parts.step is not None and parts.prefill is not None and parts.head is not None
    # recorded with the blocks' GELU as one kernel (within an ulp of Hugging Face's: here every code the same still)
    assert parts.step.fused_gelu and parts.prefill.fused_gelu
    gpt_cond_latent, _speaker = engine._latents(engine.voices.get("spk1"))
    texts = ["ሰላም", "ዛሬ የአየሩ ሁኔታ", "ኢትዮጵያ ጥንታዊ ሀገር ናት"]

    def request(i: int) -> DecodeRequest:
        return engine.decode_request(texts[i], engine.language, gpt_cond_latent, seed=i, max_codes=20)

    solo = _solo_codes(engine, [request(i) for i in range(len(texts))])
    try:
        batched = [request(i) for i in range(len(texts))]
        for stream in [loop.submit(r) for r in batched]:
            while not stream.finished:
                stream.wait(stream.produced, timeout=1.0)
        assert [r.codes for r in batched] == solo
        described = loop.describe_graphs()
        assert described is not None and " off" not in described
        graphed = (parts.prefill, parts.step, parts.head)
        assert all(g.recordings >= 1 for g in graphed) and parts.head.replays >= 10
        assert loop.graph_recordings == sum(g.recordings for g in graphed)
        assert f"prefill {parts.prefill.recordings} recordings" in described
        assert f"head {parts.head.recordings} recordings, {parts.head.replays} replays" in described
    finally:
        loop.close()
    assert DecodeLoop(engine.xtts.gpt, max_active=2).describe_graphs() is None  # eager: nothing to report


def test_the_engine_as_a_card_runs_it_speaks_as_the_cpu_engine_does(engine):
    """The whole decode path serve runs on a card, on the CPU: graphs for the step, its head and the prefill (with
    recorders that record nothing), the fused GELU, and each step launched before the one before is read back;
    three callers at once, two of them with two-piece texts (the second piece decoded ahead): each caller's audio is
    what the CPU engine gives it alone, and the loop is empty after."""
    from xtts_ft.inference.decode_graph import call_directly
    from xtts_ft.inference.decoder_settings import DecoderSettings
    from xtts_ft.serve.decode_loop import DecodeLoop
    from xtts_ft.serve.engine import SpeechEngine

    loop = DecodeLoop(engine.xtts.gpt, max_active=4,
                      settings=DecoderSettings(graphs=True, overlap=True, record=call_directly))
    parts = loop._decoder.parts
    assert parts.overlap and parts.step is not None and parts.head is not None and parts.prefill is not None
    card = SpeechEngine(engine.xtts, engine.tokenizer, engine.meta, engine.source, engine.voices,
                        settings=engine.settings, temperature=engine.temperature, max_codes=engine.max_codes, loop=loop)
    texts = ["ዛሬ የአየሩ ሁኔታ በጣም ጥሩ ነው። ኢትዮጵያ በምሥራቅ አፍሪካ የምትገኝ ሀገር ናት።",
             "ተማሪዎች ትምህርት ቤት ሄዱ ዛሬ። ኢትዮጵያ በምሥራቅ አፍሪካ የምትገኝ ሀገር ናት።",
             "ኢትዮጵያ ጥንታዊ ሀገር ናት። በጣም ጥሩ ነው።"]
    assert [len(engine.pieces(text)) for text in texts] == [2, 2, 1]
    alone = [engine.synthesize_all(text, "spk1") for text in texts]
    try:
        results = speak_at_once(card, texts)
        assert sorted(results) == [0, 1, 2]
        for i, mine in enumerate(alone):
            assert results[i].size == mine.size, texts[i]
            assert np.abs(results[i] - mine).max() <= 1e-3 * np.abs(mine).max(), texts[i]
        assert loop.largest_batch >= 2 and loop.active == 0
        described = loop.describe_graphs()
        assert described is not None and " off" not in described
    finally:
        loop.close()


def test_a_bf16_loop_decodes_with_its_own_cast_blocks_and_fp32_latents(engine):
    """decode_precision bf16 (granted on a card only; here the loop is given it directly, the CPU runs bf16 too): the
    loop holds a bf16 copy of the GPT-2 blocks, the shared model keeps fp32, and what a reader gets is fp32."""
    from xtts_ft.inference.decoder_settings import DecoderSettings
    from xtts_ft.serve.decode_loop import DecodeLoop

    loop = DecodeLoop(engine.xtts.gpt, max_active=2, settings=DecoderSettings(decode=torch.bfloat16))
    try:
        assert loop.transformer is not engine.xtts.gpt.gpt
        assert next(loop.transformer.parameters()).dtype == torch.bfloat16
        assert next(engine.xtts.gpt.gpt.parameters()).dtype == torch.float32
        gpt_cond_latent, _speaker = engine._latents(engine.voices.get("spk1"))
        request = engine.decode_request("ዛሬ የአየሩ ሁኔታ", engine.language, gpt_cond_latent, seed=0, max_codes=12)
        stream = loop.submit(request)
        while not stream.finished:
            stream.wait(stream.produced, timeout=1.0)
        assert stream.error is None and stream.produced == len(request.codes) > 0
        assert all(latent.dtype == torch.float32 and bool(torch.isfinite(latent).all()) for latent in request.latents)
    finally:
        loop.close()
    assert DecodeLoop(engine.xtts.gpt, max_active=2).transformer is engine.xtts.gpt.gpt  # fp32: no copy


def test_on_a_card_the_vocoding_runs_on_the_engines_vocoder_stream(engine, monkeypatch):
    """ServeConfig.vocoder_stream auto: every HiFiGAN call (a streamed chunk, a whole short piece) and the work that
    feeds it run inside ``torch.cuda.stream(engine.vocoder_stream)`` in the thread that does them (the CPU has no
    streams: here the stream is a stand-in and torch.cuda.stream a recorder)."""
    import contextlib

    inside = threading.local()
    calls: list[bool] = []

    @contextlib.contextmanager
    def fake_stream(stream):
        assert stream is sentinel
        inside.depth = getattr(inside, "depth", 0) + 1
        try:
            yield
        finally:
            inside.depth -= 1

    sentinel = object()
    monkeypatch.setattr(torch.cuda, "stream", fake_stream)
    assert engine.vocoder_stream is None  # a CPU: none
    streaming = engine_like(engine)
    streaming.vocoder_stream = sentinel
    hook = engine.xtts.hifigan_decoder.waveform_decoder.register_forward_pre_hook(
        lambda _m, _a: calls.append(getattr(inside, "depth", 0) > 0))
    try:
        voice = engine.voices.get("spk1")
        streamed = list(streaming.stream_piece(PIECE, voice))
        whole = streaming.synthesize_piece("ሰላም", voice)
    finally:
        hook.remove()
    assert len(streamed) >= 2 and whole.audio.size and len(calls) >= 3
    assert all(calls), "every HiFiGAN call inside the vocoder stream's context"
    # the stream changes where the work runs, not the audio: both are the piece's whole vocoding up to the joins'
    # crossfades (not each other bit for bit: a chunk ends at the codes its reader found, at least the chunk's, so a
    # busy machine moves the joins)
    whole_piece = engine.synthesize_piece(PIECE, voice).audio
    for audio in (np.concatenate(list(engine.stream_piece(PIECE, voice))), np.concatenate(streamed)):
        assert audio.size == whole_piece.size
        assert np.abs(audio - whole_piece).max() <= 1e-3 * np.abs(whole_piece).max()


def test_a_call_runs_in_the_decode_loops_thread_between_steps(engine):
    """DecodeLoop.call: what the warm-up uses to record prefills where the decoder lives (it is not thread-safe)."""
    from xtts_ft.serve.decode_loop import DecodeLoop

    loop = DecodeLoop(engine.xtts.gpt, max_active=2)
    try:
        seen = loop.call(lambda decoder: (threading.current_thread().name, decoder is loop._decoder))
        assert seen == ("xtts-ft-decode", True)

        def fails(_decoder):
            raise ValueError("the caller's own failure")

        with pytest.raises(ValueError, match="the caller's own failure"):
            loop.call(fails)
        assert loop.call(lambda decoder: decoder.record_prefills(50)) == 0  # eager (CPU): nothing to record
    finally:
        loop.close()
    with pytest.raises(RuntimeError, match="closed"):
        loop.call(lambda decoder: None)
