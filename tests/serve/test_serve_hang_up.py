"""A caller who hangs up mid-answer: noticed within a vocoder call, counted, its synthesis stopped, and its place in
the queue kept until that has happened.

Before, a pcm caller who hung up after the first chunk of a piece whose reader had fallen behind the decoder (a busy
vocoder) left its synthesis running to the end of the piece (the rest of it vocoded in one call, nobody listening:
/health counted a piece and no cancellation), and its place was given back at once, so that hidden work escaped the
admission limit.
"""

from __future__ import annotations

import time

import httpx

from tests.serve.servehelpers import ServerThread, engine_like, reader_behind

PIECE = "ዛሬ የአየሩ ሁኔታ በጣም ጥሩ ነው"  # one piece, capped at 135 codes by its length: chunks of 10, 20, 40, 40 and 25 codes
LONG_CODES = 200


def test_a_caller_who_hangs_up_while_a_chunk_is_vocoded_is_counted_and_its_work_stops(engine):
    from xtts_ft.serve.http_app import create_app

    speaker = reader_behind(engine_like(engine, max_codes=LONG_CODES))
    assert len(speaker.pieces(PIECE)) == 1 and speaker.piece_cap(PIECE) > 100
    app = create_app(speaker)
    admission, generations = app.state.admission, app.state.generations
    with ServerThread(app) as server:
        body = {"input": PIECE, "voice": "spk1", "response_format": "pcm"}
        with httpx.stream("POST", server.url + "/v1/audio/speech", json=body, timeout=60) as response:
            assert response.status_code == 200
            audio = response.iter_bytes()  # (kept: an iterator dropped closes the connection)
            assert next(audio)  # the first audio
            began = time.monotonic()
            while speaker.vocoder_turns.calls < 2:  # and the next chunk's vocoding has begun: hang up now
                assert time.monotonic() - began < 30, "no second chunk"
                time.sleep(0.001)
        hung_up = time.monotonic()
        while True:  # read in this order: the thread ends (live) before it gives the place back (admitted)
            admitted, live = admission.admitted, generations.live
            assert admitted == 1 or not live, "the place was given back while the synthesis still ran"
            if not admitted:
                break
            assert time.monotonic() - hung_up < 10, "the synthesis did not stop"
            time.sleep(0.005)
        stopped = time.monotonic() - hung_up
        health = httpx.get(server.url + "/health").json()
    assert stopped < 5, stopped  # within a vocoder call of at most stream_chunk_codes codes (and a busy machine)
    # counted as cancelled, and the piece was never finished (its remaining chunks were not vocoded)
    assert health["stats"]["cancelled"] == 1 and health["stats"]["pieces"] == 0, health
    assert health["queue"]["admitted"] == 0 and any("cancelled" in e for e in health["events"])
