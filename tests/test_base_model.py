"""Base-model resolution: a local folder, the explicit tiny model, and the Hugging Face download path.

The download path runs the real huggingface_hub client against a local HTTP server that speaks
the hub's file protocol (HEAD + GET on /<repo>/resolve/<revision>/<file>), never the network.
The same server takes uploads for tests/publish (whoami, repo creation, preupload, an NDJSON commit
of regular files), checking the Bearer token against ``_HubHandler.tokens``.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.server
import json
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from xtts_ft.base_model import OPTIONAL_FILES, REQUIRED_FILES, hf_fetcher, is_repo_id, resolve_base_model
from xtts_ft.config import BaseModelConfig
from xtts_ft.errors import ModelError

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def test_repo_id_or_local_path():
    assert is_repo_id("coqui/XTTS-v2")
    assert not is_repo_id("./models/xtts")
    assert not is_repo_id("/abs/model")
    assert not is_repo_id("models")


def test_local_folder_in_xtts_layout(tiny_base_dir):
    files = resolve_base_model(BaseModelConfig(source=str(tiny_base_dir)))
    assert files.model_pth == tiny_base_dir / "model.pth"
    assert files.speakers_pth is None


def test_local_folder_missing_files_named(tmp_path, tiny_base_dir):
    partial = tmp_path / "partial"
    shutil.copytree(tiny_base_dir, partial)
    (partial / "dvae.pth").unlink()
    with pytest.raises(ModelError, match=r"lacks dvae.pth"):
        resolve_base_model(BaseModelConfig(source=str(partial)))


def test_missing_folder_is_never_replaced_by_a_tiny_model_unless_asked(tmp_path):
    with pytest.raises(ModelError, match="does not exist"):
        resolve_base_model(BaseModelConfig(source=str(tmp_path / "nothing")))
    assert not (tmp_path / "nothing").exists()


def test_create_tiny_writes_the_real_layout(tmp_path):
    files = resolve_base_model(BaseModelConfig(source=str(tmp_path / "tiny"), create_tiny=True))
    for name in REQUIRED_FILES:
        assert (files.root / name).is_file()


class _HubHandler(http.server.BaseHTTPRequestHandler):
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
def running_hub(files: dict[str, bytes], tokens: dict[str, str] | None = None):
    """The stand-in hub on a free loopback port, serving ``files``; yields its endpoint URL."""
    _HubHandler.files, _HubHandler.tokens = files, dict(tokens or {})
    _HubHandler.requests, _HubHandler.repos = [], {}
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HubHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def hub(tiny_base_dir):
    files = {name: (tiny_base_dir / name).read_bytes() for name in REQUIRED_FILES}
    files["unrelated_big_file.bin"] = b"x" * 1000
    with running_hub(files) as url:
        yield url


def test_download_through_huggingface_hub_fetches_only_needed_files(hub, tmp_path, tiny_base_dir):
    cfg = BaseModelConfig(source="coqui/XTTS-v2", cache_dir=str(tmp_path / "hf"))
    files = resolve_base_model(cfg, fetcher=hf_fetcher(endpoint=hub))
    assert files.model_pth.read_bytes() == (tiny_base_dir / "model.pth").read_bytes()
    assert files.speakers_pth is None  # optional file absent on the "hub": skipped, not an error
    fetched = {r.split("/")[-1] for r in _HubHandler.requests if r.startswith("GET")}
    assert fetched == set(REQUIRED_FILES)
    assert all("unrelated" not in r for r in _HubHandler.requests)
    assert str(tmp_path / "hf") in str(files.root)  # in the hub cache, under a snapshot folder


def test_second_resolution_uses_the_cache_in_offline_mode(hub, tmp_path, monkeypatch):
    import huggingface_hub.constants

    cache = str(tmp_path / "hf")
    resolve_base_model(BaseModelConfig(source="coqui/XTTS-v2", cache_dir=cache), fetcher=hf_fetcher(endpoint=hub))
    n_requests = len(_HubHandler.requests)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # what HF_HUB_OFFLINE=1 sets
    files = resolve_base_model(BaseModelConfig(source="coqui/XTTS-v2", cache_dir=cache), fetcher=hf_fetcher(endpoint=hub))
    assert files.model_pth.is_file()
    assert len(_HubHandler.requests) == n_requests  # served from the cache, no request made


def test_no_network_without_cache_says_what_to_do(tmp_path, dead_endpoint):
    cfg = BaseModelConfig(source="coqui/XTTS-v2", cache_dir=str(tmp_path / "hf"))
    with pytest.raises(ModelError) as err:
        resolve_base_model(cfg, fetcher=hf_fetcher(endpoint=dead_endpoint))
    msg = str(err.value)
    assert "cannot download 'coqui/XTTS-v2'" in msg and "`hf download coqui/XTTS-v2 --local-dir DIR`" in msg
    assert len(msg.splitlines()) == 1


def test_the_offline_hint_names_a_command_the_pinned_huggingface_hub_installs():
    """The hint's `hf download ... --local-dir` exists in the installed huggingface_hub (not the removed
    `huggingface-cli`)."""
    from importlib.metadata import entry_points

    scripts = {ep.name: ep.value for ep in entry_points(group="console_scripts")}
    assert scripts.get("hf") == "huggingface_hub.cli.hf:main" and "huggingface-cli" not in scripts
    run_hf = "import sys; from huggingface_hub.cli.hf import main; sys.argv = ['hf', 'download', '--help']; main()"
    out = subprocess.run([sys.executable, "-c", run_hf], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "--local-dir" in out.stdout


def test_injected_fetcher_gets_each_file_with_revision(tiny_base_dir, tmp_path):
    calls = []

    def fetch(repo_id, filename, revision, cache_dir):
        calls.append((repo_id, filename, revision))
        dest = tmp_path / "snap" / filename
        dest.parent.mkdir(exist_ok=True)
        src = tiny_base_dir / filename
        if not src.exists():
            from huggingface_hub.errors import EntryNotFoundError

            raise EntryNotFoundError(f"{filename} not found")
        shutil.copy(src, dest)
        return str(dest)

    files = resolve_base_model(BaseModelConfig(source="me/xtts", revision="v1"), fetcher=fetch)
    assert [c[1] for c in calls] == list(REQUIRED_FILES + OPTIONAL_FILES)
    assert all(c[0] == "me/xtts" and c[2] == "v1" for c in calls)
    assert files.root == tmp_path / "snap"


def test_create_tiny_treats_a_repo_like_path_as_a_local_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def no_network(*args):
        raise AssertionError("a local tiny model must never be downloaded")

    files = resolve_base_model(BaseModelConfig(source="runs/tiny_base", create_tiny=True), fetcher=no_network)
    assert files.root == Path("runs/tiny_base") and files.model_pth.is_file()
