"""Base-model resolution: a local folder, the explicit tiny model, and the Hugging Face download path.

The download path runs the real huggingface_hub client against a local HTTP server that speaks
the hub's file protocol (tests/fixtures/hub.py), never the network.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.hub import StandInHub, serve_hub
from xtts_ft.base_model import OPTIONAL_FILES, REQUIRED_FILES, hf_fetcher, is_repo_id, resolve_base_model
from xtts_ft.config import BaseModelConfig
from xtts_ft.errors import ModelError
from xtts_ft.random_model import resolve_or_create_base_model


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
    cfg = BaseModelConfig(source=str(tmp_path / "tiny"), create_tiny=True)
    with pytest.raises(ModelError, match="does not exist"):  # finding a base model never builds one
        resolve_base_model(cfg)
    assert not (tmp_path / "tiny").exists()
    files = resolve_or_create_base_model(cfg)  # the decision to build one sits above base_model
    for name in REQUIRED_FILES:
        assert (files.root / name).is_file()


@pytest.fixture
def hub(tiny_base_dir):
    files = {name: (tiny_base_dir / name).read_bytes() for name in REQUIRED_FILES}
    files["unrelated_big_file.bin"] = b"x" * 1000
    with serve_hub(files) as url:
        yield url


def test_download_through_huggingface_hub_fetches_only_needed_files(hub, tmp_path, tiny_base_dir):
    cfg = BaseModelConfig(source="coqui/XTTS-v2", cache_dir=str(tmp_path / "hf"))
    files = resolve_base_model(cfg, fetcher=hf_fetcher(endpoint=hub))
    assert files.model_pth.read_bytes() == (tiny_base_dir / "model.pth").read_bytes()
    assert files.speakers_pth is None  # optional file absent on the "hub": skipped, not an error
    fetched = {r.split("/")[-1] for r in StandInHub.requests if r.startswith("GET")}
    assert fetched == set(REQUIRED_FILES)
    assert all("unrelated" not in r for r in StandInHub.requests)
    assert str(tmp_path / "hf") in str(files.root)  # in the hub cache, under a snapshot folder


def test_second_resolution_uses_the_cache_in_offline_mode(hub, tmp_path, monkeypatch):
    import huggingface_hub.constants

    cache = str(tmp_path / "hf")
    resolve_base_model(BaseModelConfig(source="coqui/XTTS-v2", cache_dir=cache), fetcher=hf_fetcher(endpoint=hub))
    n_requests = len(StandInHub.requests)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # what HF_HUB_OFFLINE=1 sets
    files = resolve_base_model(BaseModelConfig(source="coqui/XTTS-v2", cache_dir=cache), fetcher=hf_fetcher(endpoint=hub))
    assert files.model_pth.is_file()
    assert len(StandInHub.requests) == n_requests  # served from the cache, no request made


def test_no_network_without_cache_says_what_to_do(tmp_path, dead_endpoint, no_retry):
    cfg = BaseModelConfig(source="coqui/XTTS-v2", cache_dir=str(tmp_path / "hf"))
    with pytest.raises(ModelError) as err:
        resolve_base_model(cfg, fetcher=hf_fetcher(endpoint=dead_endpoint, retry=no_retry))
    msg = str(err.value)
    assert "cannot download 'coqui/XTTS-v2'" in msg and "`hf download coqui/XTTS-v2 --local-dir DIR`" in msg
    assert len(msg.splitlines()) == 1


def test_no_retry_policy_downloads_then_falls_back_to_the_cache_at_once(hub, tmp_path, dead_endpoint, no_retry):
    """The test-speed policy changes only the waiting: a live hub is used, a dead one means "read the cache"."""
    import time

    cache = str(tmp_path / "hf")
    cfg = BaseModelConfig(source="coqui/XTTS-v2", cache_dir=cache)
    online = resolve_base_model(cfg, fetcher=hf_fetcher(endpoint=hub, retry=no_retry))
    assert {r.split("/")[-1] for r in StandInHub.requests if r.startswith("GET")} == set(REQUIRED_FILES)
    began = time.monotonic()
    offline = resolve_base_model(cfg, fetcher=hf_fetcher(endpoint=dead_endpoint, retry=no_retry))
    assert offline.root == online.root and time.monotonic() - began < 10  # no back-off (the default waits ~25 s)


def test_a_retry_policy_tries_the_hub_as_often_as_it_says(tmp_path, dead_endpoint, caplog):
    from xtts_ft.base_model import RetryPolicy

    cfg = BaseModelConfig(source="coqui/XTTS-v2", cache_dir=str(tmp_path / "hf"))
    with caplog.at_level("INFO", logger="xtts_ft.base_model"), pytest.raises(ModelError, match="cannot download"):
        resolve_base_model(cfg, fetcher=hf_fetcher(endpoint=dead_endpoint, retry=RetryPolicy(retries=2, wait_s=0.01)))
    tries = [r.getMessage() for r in caplog.records if "not reachable" in r.getMessage()]
    assert [t.rsplit("try ", 1)[1] for t in tries] == ["1 of 3", "2 of 3", "3 of 3"]  # config.json: first file asked


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

    files = resolve_or_create_base_model(BaseModelConfig(source="runs/tiny_base", create_tiny=True), fetcher=no_network)
    assert files.root == Path("runs/tiny_base") and files.model_pth.is_file()


def test_offline_the_default_policy_answers_at_once_and_says_it_once(tmp_path, dead_endpoint, caplog):
    """No network (a Hub nobody answers): the default fetcher asks once per model, not once per file with
    huggingface_hub's back-off (~25 s), and says so in one warning."""
    import time

    cfg = BaseModelConfig(source="coqui/XTTS-v2", cache_dir=str(tmp_path / "hf"))
    began = time.monotonic()
    with caplog.at_level("INFO"), pytest.raises(ModelError, match="cannot download 'coqui/XTTS-v2'"):
        resolve_base_model(cfg, fetcher=hf_fetcher(endpoint=dead_endpoint))
    assert time.monotonic() - began < 8
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "does not answer" in warnings[0] and "local cache only" in warnings[0]
    assert len([r for r in caplog.records if "not reachable" in r.getMessage()]) == 1  # one try


def test_the_cached_files_of_an_unreachable_hub_are_read_after_one_try(hub, tmp_path, dead_endpoint, caplog):
    cache = str(tmp_path / "hf")
    cfg = BaseModelConfig(source="coqui/XTTS-v2", cache_dir=cache)
    online = resolve_base_model(cfg, fetcher=hf_fetcher(endpoint=hub))
    with caplog.at_level("INFO", logger="xtts_ft.base_model"):
        offline = resolve_base_model(cfg, fetcher=hf_fetcher(endpoint=dead_endpoint))
    assert offline.root == online.root
    assert len([r for r in caplog.records if "not reachable" in r.getMessage()]) == 1  # not once per file


def test_a_huggingface_hub_warning_is_printed_once(capsys):
    """huggingface_hub's own stderr handler and ours both printed its retry warnings: once is enough."""
    import logging

    from xtts_ft.commands.common import setup_logging

    # what huggingface_hub does when it is imported (utils/logging.py _configure_library_root_logger), here so that
    # the handler writes where this test reads
    logging.getLogger("huggingface_hub").addHandler(logging.StreamHandler())
    setup_logging(None)
    logging.getLogger("huggingface_hub.utils._http").warning("Retrying in 1s [Retry 1/5].")
    assert capsys.readouterr().err.count("Retrying in 1s [Retry 1/5].") == 1
