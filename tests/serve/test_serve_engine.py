"""The engine: what the model reads, the short-text mitigation, cancellation, cached latents.

Runs before the server tests (file order), so nothing else uses the shared model meanwhile.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest

from xtts_ft.errors import DataError
from xtts_ft.serve.voices import VoiceError


def test_model_facts_and_normalized_text(engine):
    assert engine.language == "am" and engine.sample_rate == 24000 and engine.char_limit == 200
    assert engine.normalized_text("በ2015 ዓ.ም 25 ተማሪዎች።") == "በሁለት ሺህ አስራ አምስት ዓመተ ምሕረት ሃያ አምስት ተማሪዎች."
    assert engine.voices.names() == ["spk1"]


def test_short_text_mitigation_caps_and_retries(engine):
    """A random GPT never says stop: the short piece is retried with the next seeds, then kept at its cap."""
    from xtts_ft.serve.engine import SpeechEngine

    settings = dataclasses.replace(engine.settings, short_text_retries=2)
    mitigated = SpeechEngine(engine.xtts, engine.tokenizer, engine.meta, engine.source, engine.voices,
                             settings=settings, temperature=engine.temperature, max_codes=engine.max_codes,
                             loop=engine.loop)
    piece = mitigated.pieces("ሰላም።")[0]
    cap = mitigated.piece_cap(piece)
    assert cap == min(engine.max_codes, int(np.ceil((len(piece) * settings.max_seconds_per_char + settings.min_piece_s)
                                                    * engine.codes_per_second)))
    result = mitigated.synthesize_piece(piece, engine.voices.get("spk1"))
    assert not result.ended_with_stop and result.attempts == 3 and mitigated.stats.retries == 2
    assert result.n_codes <= cap and mitigated.stats.capped == 1
    assert result.audio.dtype == np.float32 and 0 < result.audio.size <= (cap + 2) * 1024 * 24000 / 22050
    again = engine.synthesize_piece(piece, engine.voices.get("spk1"))  # no retries: only the first seed
    assert np.array_equal(again.audio, result.audio), "fixed seed per request: the same text sounds the same"


def test_cancel_ends_the_request_and_it_leaves_the_batch(engine):
    chunks: list = []
    before = engine.stats.cancelled, engine.stats.pieces
    for chunk in engine.synthesize("ዛሬ የአየሩ ሁኔታ በጣም ጥሩ ነው። ኢትዮጵያ ጥንታዊ ሀገር ናት።", "spk1",
                                   cancel=lambda: len(chunks) >= 1):  # gone once the first audio is in hand
        chunks.append(chunk)
    assert len(chunks) == 1 and chunks[0].size > 0
    assert engine.stats.cancelled == before[0] + 1 and engine.stats.pieces == before[1]
    assert "cancelled" in engine.stats.events[-1]
    deadline = time.monotonic() + 10
    while engine.loop.active and time.monotonic() < deadline:  # the row leaves at the loop's next step
        time.sleep(0.01)
    assert engine.loop.active == 0


def test_user_mistakes_are_user_errors(engine):
    with pytest.raises(DataError, match="no speakable text"):
        list(engine.synthesize("!!! ...", "spk1"))
    with pytest.raises(VoiceError, match="unknown; available voices: spk1"):
        list(engine.synthesize("ሰላም", "nobody"))
