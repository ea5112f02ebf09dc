"""A stand-in Hugging Face Hub for tests: a local HTTP server that speaks the hub's file protocol (HEAD + GET
on /<repo>/resolve/<revision>/<file>), so the real huggingface_hub client downloads without the network.

``serve_hub(files)`` yields its URL (pass it as ``endpoint=``, or as ``HF_ENDPOINT`` to a child process);
``StandInHub.requests`` records every request.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import threading
from typing import Iterator

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class StandInHub(http.server.BaseHTTPRequestHandler):
    files: dict[str, bytes] = {}
    requests: list[str] = []

    def log_message(self, *args):  # keep test output clean
        pass

    def _lookup(self):
        # /<owner>/<name>/resolve/<revision>/<filename>
        parts = self.path.split("?")[0].strip("/").split("/")
        if len(parts) != 5 or parts[2] != "resolve":
            return None
        return self.files.get(parts[4])

    def _headers(self, body: bytes | None):
        if body is None:
            self.send_response(404)
            self.send_header("X-Error-Code", "EntryNotFound")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return False
        self.send_response(200)
        self.send_header("X-Repo-Commit", COMMIT)
        self.send_header("ETag", '"' + hashlib.sha256(body).hexdigest() + '"')
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        return True

    def do_HEAD(self):
        self.requests.append("HEAD " + self.path)
        self._headers(self._lookup())

    def do_GET(self):
        self.requests.append("GET " + self.path)
        body = self._lookup()
        if self._headers(body):
            self.wfile.write(body)


@contextlib.contextmanager
def serve_hub(files: dict[str, bytes]) -> Iterator[str]:
    """Serve ``files`` (name -> bytes) under every repo id and revision; yields the base URL."""
    StandInHub.files = dict(files)
    StandInHub.requests = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StandInHub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
