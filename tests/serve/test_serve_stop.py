"""SIGTERM during streamed requests, sent to a real ``python -m xtts_ft serve`` process: every generation ends
within a vocoder call, each stream is closed off properly (a finished chunked body; an SSE client is told the text
was not finished), and the command exits 0 with one line within seconds.

Before, a stop was noticed by one caller per vocoder call, each call vocoding every code its reader had not read
yet: eight streams took 36-44 s to end, uvicorn cancelled the ones still running after its 5 s graceful-shutdown
timeout (CancelledError tracebacks, unfinished chunked bodies, no SSE ``error`` event). Earlier still, uvicorn
re-raised the signal (exit 130), and a synthesis thread left inside torch at interpreter exit could abort the process
("terminate called without an active exception", exit -6). Ctrl-C takes the same way (uvicorn's handler for both).
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time

import httpx
import pytest

from tests.fixtures.scripts import script_command, script_env
from tests.serve.servehelpers import free_port

LONG_TEXT = "ዛሬ የአየሩ ሁኔታ በጣም ጥሩ ነው። ኢትዮጵያ በምሥራቅ አፍሪካ የምትገኝ ሀገር ናት። ብዙ ሰዎች ዛሬ ወደ ገበያ ሄዱ።" * 4
PIECE_CODES = 120  # a piece's codes (its length allows more): chunks of 10, 20, 40, 40 and 10
STREAMS = ("pcm", "pcm", "pcm", "wav", "wav", "sse", "sse", "sse")  # a multi-piece wav is streamed too


def _wait_until_up(server: subprocess.Popen, url: str) -> None:
    deadline = time.monotonic() + 120
    while True:
        assert server.poll() is None and time.monotonic() < deadline, "server did not start"
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.3)


@pytest.mark.slow
def test_sigterm_during_eight_streaming_requests_ends_them_all_and_exits_within_seconds(tiny_export, voices_dir):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        script_command("xtts_ft", "serve", "--model", tiny_export, "--voices", voices_dir, "--port", port,
                       "--device", "cpu", "--max-codes", PIECE_CODES),
        env=script_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first_audio = [threading.Event() for _ in STREAMS]
    got: dict[int, object] = {}

    def client(i: int, kind: str) -> None:
        body = {"input": LONG_TEXT, "voice": "spk1", "response_format": "pcm" if kind == "sse" else kind}
        if kind == "sse":
            body["stream_format"] = "sse"
        try:
            with httpx.stream("POST", url + "/v1/audio/speech", json=body, timeout=120) as response:
                if kind == "sse":
                    events = []
                    for line in response.iter_lines():
                        if line.startswith("data: "):
                            events.append(json.loads(line[6:]))
                            first_audio[i].set()
                    got[i] = events
                else:
                    data = b""
                    for chunk in response.iter_bytes():  # an unfinished chunked body raises here
                        data += chunk
                        first_audio[i].set()
                    got[i] = (response.status_code, len(data))
        except httpx.HTTPError as exc:
            got[i] = exc
            first_audio[i].set()

    try:
        _wait_until_up(server, url)
        clients = [threading.Thread(target=client, args=(i, kind)) for i, kind in enumerate(STREAMS)]
        for thread in clients:
            thread.start()
        assert all(e.wait(120) for e in first_audio), "no audio arrived"
        stopped_at = time.monotonic()
        server.send_signal(signal.SIGTERM)
        out, err = server.communicate(timeout=60)
        took = time.monotonic() - stopped_at
        for thread in clients:
            thread.join(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    assert server.returncode == 0, (server.returncode, err[-3000:])
    for words in ("Traceback", "terminate called", "CancelledError", "graceful shutdown exceeded"):
        assert words not in err, err[-3000:]
    lines = out.strip().splitlines()
    assert lines[0].startswith("serving ") and f"uploaded voices are saved in {voices_dir}" in lines[0], out
    assert lines[-1] == f"stopped (SIGTERM); {len(STREAMS)} request(s) being spoken were cut short", out
    assert took < 10, took
    for i, kind in enumerate(STREAMS):
        result = got[i]
        assert not isinstance(result, Exception), (kind, result)  # e.g. "incomplete chunked read"
        if kind == "sse":
            assert isinstance(result, list)
            assert result[0]["type"] == "speech.audio.delta" and result[-1]["type"] == "error", [e["type"] for e in result]
            assert "stopped before the whole text was spoken" in result[-1]["error"]["message"]
            assert len([e for e in result if e["type"] == "speech.audio.delta"]) < LONG_TEXT.count("።")  # cut short
        else:
            status, size = result
            assert status == 200 and size > 0 and size % 2 == 0, (kind, result)
