"""Helpers for the serve tests (imported by bare name, like the other packages' test helpers)."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
MAX_CODES = 20  # audio codes per piece (~0.9 s): a random GPT never says stop
VOICE_CLIP = REPO_ROOT / "datasets" / "amharic_demo" / "wavs" / "spk1_001.flac"


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
