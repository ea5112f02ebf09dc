"""Finding the recogniser: local folder, download through huggingface_hub, offline cache, no network.

The download tests use the real huggingface_hub client against the local hub server of
tests/test_base_model.py (never the network).
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.fixtures.hub import StandInHub, serve_hub
from xtts_ft.asr.model_files import resolve_asr_model
from xtts_ft.asr.recognizer import Recognizer
from xtts_ft.base_model import hf_fetcher
from xtts_ft.config import AsrConfig
from xtts_ft.errors import ModelError


@pytest.fixture
def asr_hub(tiny_ctc_dir):
    files = {p.name: p.read_bytes() for p in tiny_ctc_dir.iterdir() if p.is_file()}
    files["unrelated_big_file.bin"] = b"x" * 1000
    with serve_hub(files) as url:
        yield url


def test_local_folder_loads_and_transcribes(tiny_ctc_dir):
    rec = Recognizer.from_config(AsrConfig(model=str(tiny_ctc_dir), device="cpu"))
    texts = rec.transcribe([np.zeros(8000, np.float32), np.zeros(16000, np.float32)], 22050)
    assert len(texts) == 2 and all(isinstance(t, str) for t in texts)
    assert set("".join(texts)) <= set("ሰላም ")  # only the model's own letters (random weights)


def test_missing_folder_is_an_error_never_a_substitute(tmp_path):
    with pytest.raises(ModelError, match="does not exist"):
        resolve_asr_model(AsrConfig(model=str(tmp_path / "nothing")))


def test_folder_without_weights_is_named(tmp_path, tiny_ctc_dir):
    for p in tiny_ctc_dir.iterdir():
        if p.name != "model.safetensors":
            (tmp_path / p.name).write_bytes(p.read_bytes())
    with pytest.raises(ModelError, match="lacks model.safetensors or pytorch_model.bin"):
        resolve_asr_model(AsrConfig(model=str(tmp_path)))


def test_download_through_huggingface_hub_then_offline_cache(asr_hub, tmp_path, monkeypatch, tiny_ctc_dir):
    import huggingface_hub.constants

    cfg = AsrConfig(model="someone/amharic-ctc", revision=None, cache_dir=str(tmp_path / "hf"), device="cpu")
    root = resolve_asr_model(cfg, fetcher=hf_fetcher(endpoint=asr_hub))
    assert str(tmp_path / "hf") in str(root)
    assert (root / "model.safetensors").read_bytes() == (tiny_ctc_dir / "model.safetensors").read_bytes()
    assert all("unrelated" not in r for r in StandInHub.requests)
    assert not any(r.endswith("pytorch_model.bin") and r.startswith("GET") for r in StandInHub.requests)
    n_requests = len(StandInHub.requests)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # what HF_HUB_OFFLINE=1 sets
    again = resolve_asr_model(cfg, fetcher=hf_fetcher(endpoint=asr_hub))
    assert again == root and len(StandInHub.requests) == n_requests
    Recognizer(again, device="cpu")  # the cached snapshot is a loadable model


def test_no_network_without_cache_is_one_line(tmp_path, dead_endpoint, no_retry):
    cfg = AsrConfig(model="someone/amharic-ctc", cache_dir=str(tmp_path / "hf"))
    with pytest.raises(ModelError) as err:
        resolve_asr_model(cfg, fetcher=hf_fetcher(endpoint=dead_endpoint, retry=no_retry))
    msg = str(err.value)
    assert "cannot download 'someone/amharic-ctc'" in msg and "`hf download someone/amharic-ctc --local-dir DIR`" in msg
    assert len(msg.splitlines()) == 1
