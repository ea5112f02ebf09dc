"""gpu_smoke.py's own logic, in-process and cheap: the base model every section (and child process) uses,
the download it states, and a failed section that does not hide the ones after it. The full CPU run
is in test_benchmarks.py."""

from __future__ import annotations

import sys

import pytest
import torch

from tests.fixtures.benchmarks import load_benchmark


@pytest.fixture(scope="module")
def smoke():
    return load_benchmark("gpu_smoke")


@pytest.fixture(scope="module")
def common(smoke):
    """benchmarks/smoke_common.py, as gpu_smoke.py imported it (one RESULTS list)."""
    return sys.modules["smoke_common"]


def test_a_repo_id_is_used_as_a_repo_id_in_every_section(smoke, common, tmp_path):
    args = smoke.parse_args(["--base-model", "coqui/XTTS-v2", "--out", str(tmp_path)])
    assert common.base_model_sets(args) == {"base_model.source": "coqui/XTTS-v2", "base_model.create_tiny": "false"}
    cfg = common.smoke_config(args, tmp_path / "run")
    assert cfg.base_model.source == "coqui/XTTS-v2" and cfg.base_model.create_tiny is False
    child = common.child_sets(args, tmp_path / "stop")  # the stop and two-GPU sections' headless_train.py
    assert "base_model.source=coqui/XTTS-v2" in child and "base_model.create_tiny=false" in child
    tiny = smoke.parse_args(["--out", str(tmp_path)])
    assert common.base_model_sets(tiny) == {"base_model.source": str(tmp_path / "tiny_base"),
                                           "base_model.create_tiny": "true"}


def test_help_states_the_download(smoke, capsys):
    with pytest.raises(SystemExit):
        smoke.parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "2.1 GB" in text and "Hugging Face" in text and "no download" in text
    assert "2.1 GB download" in smoke.__doc__


def test_a_failed_section_is_reported_and_the_next_ones_still_run(smoke, common, tmp_path, capsys):
    common.RESULTS.clear()
    args = smoke.parse_args(["--cpu", "--out", str(tmp_path)])
    state: dict = {}
    common.run_section(2, "short training run", lambda: 1 / 0)
    common.run_section(3, "batch-size probe vs real peak", smoke.probe_section, args, torch.device("cpu"), state)
    common.run_section(8, "two GPUs (torchrun)", smoke.two_gpu_section, args)
    out = capsys.readouterr().out
    assert "## 2. short training run" in out and "FAIL section 2 (short training run) ran: ZeroDivisionError" in out
    assert "FAIL section 3 (batch-size probe vs real peak) ran: NeedsEarlierSection: not run: it needs size" in out
    assert "## 8. two GPUs (torchrun)" in out and "skipped: 0 GPU(s) visible" in out
    assert [ok for _, ok in common.RESULTS] == [False, False]


def test_gpu_memory_is_released_before_a_child_process(common, monkeypatch, capsys):
    """With torch.cuda mocked: the cache is emptied, what is still held is printed and judged."""
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append("synchronize"))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 3 * 2**20)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 20 * 2**20)
    common.RESULTS.clear()
    common.release_gpu(torch.device("cuda", 0), "section 7")
    assert calls == ["synchronize", "empty_cache"]
    assert "before section 7: this process holds 3 MiB allocated, 20 MiB reserved" in capsys.readouterr().out
    assert common.RESULTS == [("GPU memory released before section 7", True)]
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 900 * 2**20)  # a model still alive
    common.release_gpu(torch.device("cuda", 0), "section 8")
    assert common.RESULTS[-1] == ("GPU memory released before section 8", False)

