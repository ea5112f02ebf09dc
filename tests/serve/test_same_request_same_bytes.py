"""Same request, same bytes: a request's audio does not depend on how far its reader fell behind the decoder (how busy
the vocoder was), on what the server spoke before, or on the format it is asked in. What can still differ, and when,
is README's "What happens when... the same request is sent twice": pieces that share decode steps with other rows.

Before, a reader that fell behind took every code decoded so far as its next chunk, so the joins (and the vocoder's
windows) moved with the load; and a whole wav was converted to 16 bits by libsndfile (x 32768, rounded down) where
pcm was cut towards zero (x 32767): the same audio differed by a step in many samples.
"""

from __future__ import annotations

import io

import httpx
import numpy as np
import soundfile as sf

from tests.serve.servehelpers import API_KEY, engine_like, reader_behind, speak_at_once

PIECE = "ዛሬ የአየሩ ሁኔታ በጣም ጥሩ ነው"  # one piece
TWO_SENTENCES = "ዛሬ የአየሩ ሁኔታ በጣም ጥሩ ነው። ኢትዮጵያ በምሥራቅ አፍሪካ የምትገኝ ሀገር ናት።"


def test_a_pieces_audio_does_not_depend_on_how_far_its_reader_fell_behind(engine):
    """A reader that finds the whole piece decoded when it looks again (its first vocoder call ends late) cuts it into
    the chunks a reader that kept up does, none over ``stream_chunk_codes``: the same windows and joins, the same
    samples bit for bit."""
    chunks = {"max_codes": 30, "stream_first_chunk_codes": 5, "stream_chunk_codes": 10}  # 5, 10, 10 and 5 codes
    kept_up = engine_like(engine, **chunks)
    behind = reader_behind(engine_like(engine, **chunks))
    counts: list[int] = []
    codes = behind._codes

    def counted(*args, **kwargs):
        for have, final in codes(*args, **kwargs):
            counts.append(have)
            yield have, final

    behind._codes = counted
    audio = kept_up.synthesize_all(PIECE, "spk1")
    late = behind.synthesize_all(PIECE, "spk1")
    chunk_codes = np.diff([0, *counts])
    assert len(counts) >= 3 and max(chunk_codes[1:]) <= behind.settings.stream_chunk_codes, counts
    assert late.size == audio.size and np.array_equal(late, audio)


def test_a_request_gives_the_same_bytes_after_other_requests_and_as_a_whole_wav(server, engine):
    """One sentence as pcm, another text, the sentence again, and as a whole wav file: the same samples each time."""
    headers = {"Authorization": f"Bearer {API_KEY}"}
    body = {"input": PIECE + "።", "voice": "spk1", "response_format": "pcm"}
    assert len(engine.pieces(body["input"])) == 1

    def speak(**fields) -> bytes:
        response = httpx.post(server.url + "/v1/audio/speech", headers=headers, json={**body, **fields}, timeout=120)
        assert response.status_code == 200, response.text
        return response.content

    first = speak()
    speak(input="ሰላም።")
    again = speak()
    wav, rate = sf.read(io.BytesIO(speak(response_format="wav")), dtype="int16")
    pcm = np.frombuffer(first, dtype="<i2")
    assert again == first and pcm.size > 0
    assert rate == engine.sample_rate and np.array_equal(wav, pcm)


def test_beside_other_callers_a_text_differs_by_at_most_one_step_in_a_few_samples(engine):
    """What README says is left: a text spoken while others decode in the same batch gets its own codes, but its
    latents can differ in the last bit of a float (matrix products and padded attention add in another order), which
    moves a 16-bit sample by one step now and then."""
    from xtts_ft.serve.audio_formats import pcm16

    engine = engine_like(engine, max_codes=12)
    alone = np.frombuffer(pcm16(engine.synthesize_all(TWO_SENTENCES, "spk1")), dtype="<i2")
    beside = np.frombuffer(pcm16(speak_at_once(engine, [TWO_SENTENCES, "ተማሪዎች ትምህርት ቤት ሄዱ ዛሬ።"])[0]), dtype="<i2")
    assert beside.size == alone.size and engine.loop.largest_batch >= 2
    steps = np.abs(beside.astype(np.int32) - alone)
    assert steps.max() <= 1 and np.count_nonzero(steps) <= alone.size // 1000, (steps.max(), np.count_nonzero(steps))
