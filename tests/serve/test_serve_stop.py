"""Ctrl-C during requests, sent to a real ``python -m xtts_ft serve`` process: the generations end, the streams
are closed off properly (an SSE client is told the text was not finished), and the command exits 0 with one line.

Before, uvicorn waited out its 5 s graceful-shutdown timeout, cancelled the streaming task (a traceback ending
in CancelledError) and re-raised SIGINT (exit 130); a synthesis thread left inside torch at interpreter exit
could abort the process ("terminate called without an active exception", exit -6).
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
from tests.serve.servehelpers import MAX_CODES, free_port

LONG_TEXT = "ዛሬ የአየሩ ሁኔታ በጣም ጥሩ ነው። ኢትዮጵያ በምሥራቅ አፍሪካ የምትገኝ ሀገር ናት። ብዙ ሰዎች ዛሬ ወደ ገበያ ሄዱ።" * 4


@pytest.mark.slow
def test_ctrl_c_during_two_streaming_requests_exits_cleanly(tiny_export, voices_dir):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        script_command("xtts_ft", "serve", "--model", tiny_export, "--voices", voices_dir, "--port", port,
                       "--device", "cpu", "--max-codes", MAX_CODES),
        env=script_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None and time.monotonic() < deadline, "server did not start"
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        first_data = {"pcm": threading.Event(), "sse": threading.Event()}
        got: dict = {}

        def pcm() -> None:
            body = {"input": LONG_TEXT, "voice": "spk1", "response_format": "pcm"}
            data = b""
            with httpx.stream("POST", url + "/v1/audio/speech", json=body, timeout=120) as response:
                for chunk in response.iter_bytes():
                    data += chunk
                    first_data["pcm"].set()
            got["pcm"] = (response.status_code, len(data))

        def sse() -> None:
            body = {"input": LONG_TEXT, "voice": "spk1", "response_format": "pcm", "stream_format": "sse"}
            events = []
            with httpx.stream("POST", url + "/v1/audio/speech", json=body, timeout=120) as response:
                for line in response.iter_lines():
                    if line.startswith("data: "):
                        events.append(json.loads(line[6:]))
                        first_data["sse"].set()
            got["sse"] = events

        clients = [threading.Thread(target=pcm), threading.Thread(target=sse)]
        for client in clients:
            client.start()
        assert all(e.wait(120) for e in first_data.values()), "no audio arrived"
        stopped_at = time.monotonic()
        server.send_signal(signal.SIGINT)
        out, err = server.communicate(timeout=60)
        took = time.monotonic() - stopped_at
        for client in clients:
            client.join(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    assert server.returncode == 0, (server.returncode, err[-3000:])
    assert "Traceback" not in err and "terminate called" not in err and "CancelledError" not in err, err[-3000:]
    lines = out.strip().splitlines()
    assert lines[0].startswith("serving ") and f"uploaded voices are saved in {voices_dir}" in lines[0], out
    assert lines[-1] == "stopped (SIGINT); 2 request(s) being spoken were cut short", out
    assert took < 30, took  # no hang (the cut is shown below: fewer pieces than the text has)
    status, pcm_bytes = got["pcm"]  # the raw stream was closed off properly (no "incomplete chunked read")
    assert status == 200 and pcm_bytes > 0 and pcm_bytes % 2 == 0
    events = got["sse"]
    assert events[0]["type"] == "speech.audio.delta" and events[-1]["type"] == "error", [e["type"] for e in events]
    assert "stopped before the whole text was spoken" in events[-1]["error"]["message"]
    deltas = [e for e in events if e["type"] == "speech.audio.delta"]
    assert len(deltas) < LONG_TEXT.count("።"), len(deltas)  # the generation ended early: not every sentence came
