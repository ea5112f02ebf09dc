"""Helpers for the serve tests (imported by bare name, like the other packages' test helpers)."""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
from pathlib import Path
from typing import Optional

REPO_ROOT = Path(__file__).resolve().parents[2]
MAX_CODES = 20  # audio codes per piece (~0.9 s): a random GPT never says stop
VOICE_CLIP = REPO_ROOT / "datasets" / "amharic_demo" / "wavs" / "spk1_001.flac"


def engine_like(engine, *, max_codes: Optional[int] = None, **settings):
    """A SpeechEngine over ``engine``'s model, voices and decode loop (nothing loaded again) with other ``settings``
    (ServeConfig fields) and, if given, another code limit; its own stats and vocoder turns."""
    from xtts_ft.serve.engine import SpeechEngine

    return SpeechEngine(engine.xtts, engine.tokenizer, engine.meta, engine.source, engine.voices,
                        settings=dataclasses.replace(engine.settings, **settings), temperature=engine.temperature,
                        max_codes=max_codes or engine.max_codes, loop=engine.loop)


def reader_behind(engine, timeout: float = 60.0):
    """``engine`` with a busy vocoder: its first call ends only once the decode loop has no row left, so the first
    piece's reader finds the whole piece decoded when it looks again (as behind other callers' vocoding)."""
    turns = engine.vocoder_turns
    run = turns._run

    def first_call_late(windows):
        if turns.calls == 1:
            deadline = time.monotonic() + timeout
            while engine.loop.active and time.monotonic() < deadline:
                time.sleep(0.01)
        return run(windows)

    turns._run = first_call_late
    return engine


def speak_at_once(engine, texts: list[str]) -> dict:
    """Each of ``texts`` spoken by ``engine`` in a thread of its own, all starting together: each caller's audio (a
    caller that failed has none)."""
    results: dict = {}
    start = threading.Barrier(len(texts))

    def caller(i: int) -> None:
        start.wait()
        results[i] = engine.synthesize_all(texts[i], "spk1")

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(len(texts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return results


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerThread:
    """uvicorn serving ``app`` on 127.0.0.1 in a background thread (signal handlers stay with the main thread)."""

    def __init__(self, app) -> None:
        import uvicorn

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "server did not start"
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


API_KEY = "test-key"
