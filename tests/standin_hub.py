"""A stand-in Hugging Face Hub for tests: a local HTTP server that speaks the hub's file protocol (HEAD + GET
on /<repo>/resolve/<revision>/<file>), so the real huggingface_hub client downloads without the network, and
takes uploads (whoami, validate-yaml, repo creation, preupload, an NDJSON commit of regular files) with the
Bearer token checked against ``StandInHub.tokens``.

``serve_hub(files, tokens=)`` yields its URL (pass it as ``endpoint=``, or as ``HF_ENDPOINT`` to a child
process); ``StandInHub.requests`` records every request, ``StandInHub.repos`` what was uploaded.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.server
import json
import re
import threading
from typing import Iterator

import yaml

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class StandInHub(http.server.BaseHTTPRequestHandler):
    files: dict[str, bytes] = {}
    requests: list[str] = []
    # upload side: token -> "write" or "read"; repo id -> {"private": bool, "files": {path: bytes}}
    tokens: dict[str, str] = {}
    repos: dict[str, dict] = {}

    def log_message(self, *args):  # keep test output clean
        pass

    def _lookup(self):
        # /<owner>/<name>/resolve/<revision>/<path in repo>
        parts = self.path.split("?")[0].strip("/").split("/")
        if len(parts) < 5 or parts[2] != "resolve":
            return None
        repo = self.repos.get("/".join(parts[:2]))
        if repo is not None:  # a repo uploaded to in this test
            return repo["files"].get("/".join(parts[4:]))
        return self.files.get(parts[4]) if len(parts) == 5 else None

    def _json(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _access(self) -> str | None:
        token = self.headers.get("Authorization", "").removeprefix("Bearer ")
        return self.tokens.get(token)

    def do_POST(self):
        self.requests.append("POST " + self.path)
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        access = self._access()
        if access is None:
            return self._json(401, {"error": "Invalid credentials in Authorization header"})
        if access != "write":
            return self._json(403, {"error": "You don't have the rights to create a model under this namespace"})
        path = self.path.split("?")[0]
        if path == "/api/validate-yaml":  # the hub parses a README's front matter before any upload
            match = re.match(r"^---\n(.*?)\n---\n", json.loads(body)["content"], re.S)
            meta = yaml.safe_load(match.group(1)) if match else None
            errors = [] if isinstance(meta, dict) else ["no YAML metadata block"]
            if isinstance(meta, dict) and meta.get("license") == "other" and not re.fullmatch(
                    r"[a-z0-9.-]+", str(meta.get("license_name", ""))):
                errors.append('"license_name" is required (lowercase, digits, "-", ".") with license: other')
            return self._json(400 if errors else 200, {"errors": [{"message": e} for e in errors], "warnings": []})
        if path == "/api/repos/create":
            req = json.loads(body)
            repo_id = f"{req['organization']}/{req['name']}"
            if repo_id in self.repos:
                return self._json(409, {"error": "You already created this model repo", "url": repo_id})
            self.repos[repo_id] = {"private": req.get("visibility") == "private", "files": {}}
            return self._json(200, {"url": f"http://{self.headers['Host']}/{repo_id}"})
        parts = path.strip("/").split("/")  # api/models/<owner>/<name>/(preupload|commit)/<revision>
        repo = self.repos.get("/".join(parts[2:4])) if len(parts) == 6 else None
        if repo is None:
            return self._json(404, {"error": "Repository not found"})
        if parts[4] == "preupload":  # every file goes inline in the commit ("regular", no LFS)
            files = json.loads(body)["files"]
            return self._json(200, {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False}
                                              for f in files]})
        if parts[4] == "commit":
            for line in body.splitlines():
                op = json.loads(line)
                if op["key"] == "file":
                    repo["files"][op["value"]["path"]] = base64.b64decode(op["value"]["content"])
            return self._json(200, {"commitUrl": f"http://{self.headers['Host']}/{parts[2]}/{parts[3]}/commit/{COMMIT}",
                                    "commitOid": COMMIT})
        return self._json(404, {"error": "unknown endpoint"})

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
        if self.path.startswith("/api/whoami-v2"):
            access = self._access()
            if access is None:
                return self._json(401, {"error": "Invalid credentials in Authorization header"})
            return self._json(200, {"type": "user", "name": "tester", "auth": {"accessToken": {"role": access}}})
        body = self._lookup()
        if self._headers(body):
            self.wfile.write(body)


@contextlib.contextmanager
def serve_hub(files: dict[str, bytes], tokens: dict[str, str] | None = None) -> Iterator[str]:
    """Serve ``files`` (name -> bytes) under every repo id and revision on a free loopback port; yields the base URL.

    ``tokens`` (token -> "write" or "read") are the accounts uploads are checked against."""
    StandInHub.files, StandInHub.tokens = dict(files), dict(tokens or {})
    StandInHub.requests, StandInHub.repos = [], {}
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StandInHub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
