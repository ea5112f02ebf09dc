"""The warm-up before serve listens: its rounds, what it leaves behind, and when it runs."""

from __future__ import annotations

import dataclasses
import threading

import pytest

from xtts_ft.errors import DataError
from xtts_ft.serve.warm_up import callers_per_round, wanted, warm_up


def test_the_rounds_double_up_to_the_batch_limit():
    assert callers_per_round(1) == [1]
    assert callers_per_round(2) == [1, 2]
    assert callers_per_round(16) == [1, 2, 4, 8, 16]
    assert callers_per_round(12) == [1, 2, 4, 8, 12]


def test_auto_warms_up_on_cuda_only():
    assert wanted("auto", "cuda") and not wanted("auto", "cpu")
    assert wanted("on", "cpu") and not wanted("off", "cuda")


def _own_engine(engine, **settings):
    """The shared engine's model and voices with a decode loop of its own (the rounds fill it to its limit)."""
    from xtts_ft.serve.engine import SpeechEngine

    return SpeechEngine(engine.xtts, engine.tokenizer, engine.meta, engine.source, engine.voices,
                        settings=dataclasses.replace(engine.settings, **settings), temperature=engine.temperature,
                        max_codes=engine.max_codes)


def test_the_warm_up_runs_its_rounds_and_leaves_no_counts(engine, monkeypatch):
    from xtts_ft.inference.batch_decode import BatchDecoder

    asked: list[tuple[int, str]] = []
    real = BatchDecoder.record_prefills

    def record_prefills(decoder, longest):
        asked.append((longest, threading.current_thread().name))
        return real(decoder, longest)

    monkeypatch.setattr(BatchDecoder, "record_prefills", record_prefills)
    warmed = _own_engine(engine, max_active_streams=3)
    try:
        report = warm_up(warmed)
        assert report.skipped is None and report.rounds == (1, 2, 3) and report.recordings == 0  # CPU: no graphs
        # then the prefill of one request for every length a piece can have, in the decode loop's thread
        conditioning = warmed._latents(warmed.voices.get(warmed.voices.names()[0]))[0].shape[1]
        assert asked == [(conditioning + warmed.max_text_tokens + 3, "xtts-ft-decode")]
        assert warmed.loop.steps > 0 and warmed.loop.largest_batch >= 1  # (how many overlapped is the threads' say)
        assert warmed.stats.pieces == 0 and not warmed.stats.first_chunks.records  # the warm-up is not served audio
        assert report.describe().startswith("warm-up: 3 rounds of 1, 2, 3 callers in ")
    finally:
        warmed.close()


def test_the_warm_up_is_skipped_without_a_voice_or_with_a_refused_text(engine, monkeypatch):
    from xtts_ft.serve.voices import VoiceLibrary

    voiceless = _own_engine(engine)
    voiceless.voices = VoiceLibrary()
    try:
        report = warm_up(voiceless)
        assert report.skipped and "no voice yet" in report.describe() and voiceless.loop.steps == 0
    finally:
        voiceless.close()
    refusing = _own_engine(engine)

    def refuse(text, voice, **_kwargs):
        raise DataError("language xx: this tokenizer has no [xx] token\nmore")
        yield  # a generator, as synthesize is

    monkeypatch.setattr(refusing, "synthesize", refuse)
    try:
        report = warm_up(refusing)
        assert report.describe() == "warm-up skipped: the warm-up text was refused: language xx: this tokenizer has no [xx] token"
    finally:
        refusing.close()


def test_a_failure_that_is_not_the_users_stops_the_warm_up(engine, monkeypatch):
    broken = _own_engine(engine)

    def fail(text, voice, **_kwargs):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
        yield

    monkeypatch.setattr(broken, "synthesize", fail)
    try:
        with pytest.raises(RuntimeError, match="illegal memory access"):
            warm_up(broken)
    finally:
        broken.close()
