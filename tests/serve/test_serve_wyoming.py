"""Wyoming (Home Assistant): the ``wyoming`` package's own client gets voices from Describe and audio for Synthesize."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from tests.serve.servehelpers import free_port


@pytest.fixture(scope="module")
def wyoming_uri(engine):
    from xtts_ft.serve.wyoming_server import run_wyoming

    uri = f"tcp://127.0.0.1:{free_port()}"
    loop = asyncio.new_event_loop()
    ready = threading.Event()

    async def main() -> None:
        started = asyncio.Event()
        task = asyncio.ensure_future(run_wyoming(engine, uri, started))
        await started.wait()
        ready.set()
        try:
            await task
        except asyncio.CancelledError:  # the fixture's teardown cancels the server: the expected end
            pass

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    assert ready.wait(30)
    yield uri
    loop.call_soon_threadsafe(lambda: [t.cancel() for t in asyncio.all_tasks(loop)])
    thread.join(timeout=10)


async def _ask(uri: str, event, until: str) -> list:
    from wyoming.client import AsyncClient

    received = []
    async with AsyncClient.from_uri(uri) as client:
        await client.write_event(event)
        while True:
            reply = await asyncio.wait_for(client.read_event(), timeout=60)
            assert reply is not None, "connection closed early"
            received.append(reply)
            if reply.type in (until, "error"):
                return received


def test_describe_lists_the_voices(wyoming_uri, engine):
    from wyoming.info import Describe, Info

    (reply,) = asyncio.run(_ask(wyoming_uri, Describe().event(), "info"))
    info = Info.from_event(reply)
    voices = {v.name: v for v in info.tts[0].voices}  # (an upload in another test file may have added one)
    assert list(voices)[0] == "spk1" and voices["spk1"].languages == ["am"]
    assert set(voices) == set(engine.voices.names())


def test_synthesize_event_gets_audio_in_the_models_language(wyoming_uri, engine):
    from wyoming.audio import AudioChunk, AudioStart
    from wyoming.tts import Synthesize

    # Home Assistant sends no language (and may name a voice this server lacks): the model's own is used.
    events = asyncio.run(_ask(wyoming_uri, Synthesize(text="ሰላም፣ እንዴት ነህ?").event(), "audio-stop"))
    types = [e.type for e in events]
    assert types[0] == "audio-start" and types[-1] == "audio-stop" and "audio-chunk" in types, types
    start = AudioStart.from_event(events[0])
    assert (start.rate, start.width, start.channels) == (engine.sample_rate, 2, 1)
    pcm = b"".join(AudioChunk.from_event(e).audio for e in events if e.type == "audio-chunk")
    samples = np.frombuffer(pcm, dtype="<i2")
    assert samples.size > 0.2 * engine.sample_rate and np.abs(samples).max() > 0


@pytest.mark.parametrize("text, words", [
    ("ሰላም Привет", "text: letters in a script the model does not read (Cyrillic: 'Привет')"),
    ("ሀ" * 4097, "text: 4097 characters; at most 4096 per request"),
    ("   ", "text: empty"),
])
def test_a_request_the_http_server_would_refuse_gets_an_error_before_any_audio(wyoming_uri, engine, text, words):
    from wyoming.error import Error
    from wyoming.tts import Synthesize

    pieces_before = engine.stats.pieces
    events = asyncio.run(_ask(wyoming_uri, Synthesize(text=text).event(), "audio-stop"))
    assert [e.type for e in events] == ["error"], [e.type for e in events]  # no audio-start first
    error = Error.from_event(events[0])
    assert error.text.startswith(words) and "\n" not in error.text and error.code == "bad-request"
    assert engine.stats.pieces == pieces_before  # nothing was synthesised


def test_a_client_that_hangs_up_mid_stream_stops_its_synthesis_with_one_line_not_a_traceback(wyoming_uri, engine,
                                                                                               caplog):
    """Home Assistant hangs up once it has heard enough: the synthesis stops (counted as cancelled) and the server logs
    one line. Before, the handler re-raised the ConnectionResetError, and asyncio logged it as a task exception that
    was never retrieved, with its traceback."""
    import gc
    import logging
    import time

    from wyoming.client import AsyncClient
    from wyoming.tts import Synthesize

    text = "ዛሬ የአየሩ ሁኔታ በጣም ጥሩ ነው። ኢትዮጵያ በምሥራቅ አፍሪካ የምትገኝ ሀገር ናት። ብዙ ሰዎች ዛሬ ወደ ገበያ ሄዱ።"
    cancelled = engine.stats.cancelled

    async def hang_up_after_the_first_audio() -> None:
        async with AsyncClient.from_uri(wyoming_uri) as client:  # leaving it closes the connection, audio unread
            await client.write_event(Synthesize(text=text).event())
            while True:
                event = await asyncio.wait_for(client.read_event(), timeout=60)
                assert event is not None and event.type != "error", event
                if event.type == "audio-chunk":
                    return

    with caplog.at_level(logging.INFO):
        asyncio.run(hang_up_after_the_first_audio())
        deadline = time.monotonic() + 10
        while engine.stats.cancelled == cancelled:
            assert time.monotonic() < deadline, "the synthesis did not stop"
            time.sleep(0.02)
        time.sleep(0.2)  # the handler's task ends in the server's loop
        gc.collect()  # (an unretrieved task exception is logged when its task is collected)
    assert engine.stats.cancelled == cancelled + 1
    faults = [r for r in caplog.records if r.exc_info or "never retrieved" in r.getMessage()]
    assert not faults, [r.getMessage() for r in faults]
    assert any("hung up" in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]
