"""The HTTP server as apps see it: the official ``openai`` client, streaming, many clients, bad requests.

One in-process uvicorn on a loopback port (conftest ``server``) over the tiny export; every request is
a short text, so each piece costs about a second of CPU.
"""

from __future__ import annotations

import io
import json
import threading
import time

import httpx
import numpy as np
import pytest
import soundfile as sf

from tests.serve.servehelpers import API_KEY, VOICE_CLIP, ServerThread

THREE_SENTENCES = "ዛሬ የአየሩ ሁኔታ በጣም ጥሩ ነው። ኢትዮጵያ በምሥራቅ አፍሪካ የምትገኝ ሀገር ናት። ብዙ ሰዎች ዛሬ ወደ ገበያ ሄዱ።"


@pytest.fixture(scope="module")
def client(server):
    import openai

    return openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)


def test_openai_client_gets_speech_that_decodes(client, engine):
    response = client.audio.speech.create(model="tts-1", voice="spk1", input="ሰላም፣ እንዴት ነህ?", response_format="wav")
    audio, sr = sf.read(io.BytesIO(response.content), dtype="float32")
    assert sr == engine.sample_rate and 0.2 < audio.size / sr < 2.0 and np.abs(audio).max() > 0


def test_streaming_delivers_the_first_piece_before_the_whole_text_is_synthesised(client, engine):
    pieces = engine.pieces(THREE_SENTENCES)
    assert len(pieces) == 3
    start = time.perf_counter()
    arrivals, data = [], b""
    with client.audio.speech.with_streaming_response.create(
        model="tts-1", voice="spk1", input=THREE_SENTENCES, response_format="pcm"
    ) as response:
        for chunk in response.iter_bytes():
            arrivals.append(time.perf_counter() - start)
            data += chunk
    total = arrivals[-1]
    assert len(data) % 2 == 0 and len(data) // 2 > 3 * engine.sample_rate * 0.5  # three pieces of audio
    # The first audio arrives after about one piece of three: well before the last.
    assert arrivals[0] < 0.7 * total, (arrivals, total)


def test_one_sentence_in_pcm_is_streamed_as_it_is_decoded(server, engine):
    """Raw PCM of a single piece is not held back until the piece is whole: it goes out chunked (no length known
    in advance), the engine's first chunk first; a one-piece wav is still a complete file with its length."""
    headers = {"Authorization": f"Bearer {API_KEY}"}
    body = {"input": "ሰላም።", "voice": "spk1", "response_format": "pcm"}
    assert len(engine.pieces(body["input"])) == 1
    with httpx.stream("POST", server.url + "/v1/audio/speech", headers=headers, json=body, timeout=60) as response:
        assert response.status_code == 200
        assert "content-length" not in response.headers and response.headers.get("transfer-encoding") == "chunked"
        data = b"".join(response.iter_bytes())
    assert len(data) % 2 == 0 and len(data) > 0
    whole = httpx.post(server.url + "/v1/audio/speech", headers=headers, json={**body, "response_format": "wav"},
                       timeout=60)
    assert int(whole.headers["content-length"]) == len(whole.content)


def test_every_producible_format_decodes(client, server, engine):
    formats = [f for f in server.server.config.app.state.formats if f != "pcm"]
    assert {"wav", "flac"} <= set(formats)
    for fmt in formats:
        response = client.audio.speech.create(model="tts-1", voice="spk1", input="አመሰግናለሁ።", response_format=fmt)
        info = sf.info(io.BytesIO(response.content))
        assert info.samplerate == engine.sample_rate and info.duration > 0.2, fmt


def test_sse_stream_sends_deltas_then_done(server):
    events = []
    with httpx.stream("POST", server.url + "/v1/audio/speech", headers={"Authorization": f"Bearer {API_KEY}"},
                      json={"input": "ሰላም።", "voice": "spk1", "response_format": "pcm", "stream_format": "sse"},
                      timeout=60) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
    assert [e["type"] for e in events][-1] == "speech.audio.done" and events[0]["type"] == "speech.audio.delta"
    assert events[-1]["usage"]["output_bytes"] > 0


def test_models_voices_and_an_uploaded_voice(client, server, engine):
    assert [m.id for m in client.models.list().data] == ["xtts-ft"]
    headers = {"Authorization": f"Bearer {API_KEY}"}
    with open(VOICE_CLIP, "rb") as clip:
        added = httpx.post(server.url + "/v1/voices", headers=headers, data={"name": "uploaded"},
                           files={"file": ("me.flac", clip, "audio/flac")})
    assert added.status_code == 201 and added.json()["source"] == "upload"
    names = [v["name"] for v in httpx.get(server.url + "/v1/voices", headers=headers).json()["voices"]]
    assert names == ["spk1", "uploaded"]
    cached = engine.voices.cached_clips()
    client.audio.speech.create(model="tts-1", voice="uploaded", input="ሰላም።", response_format="pcm")
    assert engine.voices.cached_clips() == cached, "same clip content as spk1: its latents are reused"


def test_eight_clients_at_once_one_hangs_up(server, engine):
    headers = {"Authorization": f"Bearer {API_KEY}"}
    results: dict[int, object] = {}
    cancelled_before = engine.stats.cancelled

    def speak(i: int) -> None:
        body = {"input": f"ሰላም {i}።", "voice": "spk1", "response_format": "wav"}
        results[i] = httpx.post(server.url + "/v1/audio/speech", headers=headers, json=body, timeout=180)

    def hang_up() -> None:
        body = {"input": THREE_SENTENCES * 3, "voice": "spk1", "response_format": "pcm"}
        with httpx.stream("POST", server.url + "/v1/audio/speech", headers=headers, json=body, timeout=180) as r:
            for _ in r.iter_bytes():
                break  # the first piece arrived: leave mid-stream
        results["hung_up"] = r.status_code

    threads = [threading.Thread(target=hang_up)] + [threading.Thread(target=speak, args=(i,)) for i in range(7)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    assert results.pop("hung_up") == 200
    assert sorted(results) == list(range(7))
    for i, response in results.items():
        assert response.status_code == 200, (i, response.text)
        assert sf.info(io.BytesIO(response.content)).duration > 0.2
    deadline = time.monotonic() + 10
    while engine.stats.cancelled == cancelled_before and time.monotonic() < deadline:
        time.sleep(0.1)
    health = httpx.get(server.url + "/health").json()
    assert health["stats"]["cancelled"] == cancelled_before + 1, health  # its generation stopped, mid-text
    assert any("cancelled" in e for e in health["events"])
    assert health["status"] == "ok" and health["queue"]["admitted"] == 0


def test_a_full_queue_answers_503_with_retry_after(engine):
    import dataclasses

    from xtts_ft.serve.http_app import create_app

    app = create_app(engine, settings=dataclasses.replace(engine.settings, queue_size=1))
    with ServerThread(app) as small:
        with httpx.stream("POST", small.url + "/v1/audio/speech", timeout=60,
                          json={"input": THREE_SENTENCES, "voice": "spk1", "response_format": "pcm"}) as first:
            busy = httpx.post(small.url + "/v1/audio/speech", json={"input": "ሰላም።", "voice": "spk1"}, timeout=30)
            for _ in first.iter_bytes():
                break
    assert busy.status_code == 503 and busy.headers["retry-after"] == "2"
    assert "server busy" in busy.json()["error"]["message"]


def _speech(**fields):
    return {"json": {"model": "tts-1", "input": "ሰላም።", "voice": "spk1", "response_format": "wav", **fields}}


BAD_REQUESTS = {
    "empty input": ("/v1/audio/speech", _speech(input=""), 400, "input: empty"),
    "5,000 characters": ("/v1/audio/speech", _speech(input="ሀ" * 5000), 400, "at most 4096"),
    "unknown voice": ("/v1/audio/speech", _speech(voice="nobody"), 400, "unknown; available voices: spk1"),
    "voice name with ../": ("/v1/audio/speech", _speech(voice="../voices/spk1"), 400, "no path"),
    "speed 10": ("/v1/audio/speech", _speech(speed=10), 400, "between 0.25 and 4.0"),
    "unsupported format": ("/v1/audio/speech", _speech(response_format="aac"), 400, "can produce"),
    "unknown format": ("/v1/audio/speech", _speech(response_format="xyz"), 400, "wav, pcm"),
    "not JSON": ("/v1/audio/speech", {"content": b"{nope", "headers": {"content-type": "application/json"}}, 400, "JSON"),
    "wrong language": ("/v1/audio/speech", _speech(language="xx"), 400, "language 'xx'"),
    "non-audio upload": ("/v1/voices", {"data": {"name": "notaudio"}, "files": {"file": ("a.wav", b"plain text")}},
                         400, "cannot be decoded"),
    "upload named ../": ("/v1/voices", {"data": {"name": "../evil"}, "files": {"file": ("a.wav", b"x")}}, 400,
                         "no path"),
    "wrong API key": ("/v1/audio/speech", {**_speech(), "headers": {"Authorization": "Bearer wrong"}}, 401,
                      "invalid API key"),
}


@pytest.mark.parametrize("case", list(BAD_REQUESTS))
def test_bad_requests_get_a_clear_4xx(server, case):
    path, kwargs, status, words = BAD_REQUESTS[case]
    kwargs = {"headers": {"Authorization": f"Bearer {API_KEY}"}, **kwargs}
    response = httpx.post(server.url + path, timeout=60, **kwargs)
    assert response.status_code == status, response.text
    message = response.json()["error"]["message"]
    assert words in message and "\n" not in message and "Traceback" not in response.text
    assert httpx.get(server.url + "/health").json()["status"] == "ok"


def test_a_whole_file_request_that_hangs_up_is_cancelled_too(server, engine):
    """flac is sent only when complete: the server watches the connection while it synthesises."""
    cancelled_before = engine.stats.cancelled
    body = {"input": THREE_SENTENCES * 3, "voice": "spk1", "response_format": "flac"}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(server.url + "/v1/audio/speech", headers={"Authorization": f"Bearer {API_KEY}"}, json=body,
                   timeout=httpx.Timeout(60, read=1.0))  # gives up after a second, mid-text
    deadline = time.monotonic() + 10
    while engine.stats.cancelled == cancelled_before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert engine.stats.cancelled == cancelled_before + 1
    assert httpx.get(server.url + "/health").json()["queue"]["admitted"] == 0
