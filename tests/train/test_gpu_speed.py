"""GPU speed settings chosen with torch.cuda mocked (no GPU here): TF32 for fp32 math on compute
capability >= 8.0, and the rollback snapshot in pinned (page-locked) host memory on a GPU."""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn as nn

from xtts_ft.config import Config
from xtts_ft.train import stability
from xtts_ft.train.precision import apply_tf32
from xtts_ft.train.stability import Snapshot, pin_snapshots

GPU = torch.device("cuda", 0)
CPU = torch.device("cpu")


@pytest.fixture
def card(monkeypatch):
    """``card((major, minor))`` mocks one visible GPU; TF32 flags are restored after the test."""
    for flags in (torch.backends.cuda.matmul, torch.backends.cudnn):
        monkeypatch.setattr(flags, "allow_tf32", flags.allow_tf32)

    def use(capability) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "mocked card")
        monkeypatch.setattr(torch.version, "hip", None)

    return use


def _tf32() -> tuple[bool, bool]:
    return torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32


def test_tf32_is_a_config_key_that_defaults_on():
    assert Config().precision.tf32 is True


@pytest.mark.parametrize("capability", [(8, 0), (9, 0)])
def test_tf32_on_for_ampere_and_newer_and_logged(card, capability, caplog):
    card(capability)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    with caplog.at_level(logging.INFO, logger="xtts_ft.train.precision"):
        assert apply_tf32(True, GPU) is True
    assert _tf32() == (True, True)
    assert "TF32 on for fp32 matmuls" in caplog.text and "compute capability {}.{}".format(*capability) in caplog.text
    assert apply_tf32(False, GPU) is False and _tf32() == (False, False)  # precision.tf32: false -> full fp32


@pytest.mark.parametrize("capability", [(7, 5), (7, 0)])
def test_tf32_untouched_on_a_t4_or_v100_and_on_the_cpu(card, capability):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = True
    assert apply_tf32(True, CPU) is False and _tf32() == (False, True)  # no mock yet: the CPU path
    card(capability)
    assert apply_tf32(True, GPU) is False and _tf32() == (False, True)  # no TF32 hardware: left as torch has it


def test_snapshots_are_pinned_on_a_gpu_only(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert pin_snapshots(GPU) and not pin_snapshots(CPU)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert not pin_snapshots(GPU)


def test_pinned_snapshot_reuses_its_buffers_and_restores_exactly(monkeypatch):
    """The pinned path with the allocation mocked: buffers are allocated once, refilled on each refresh."""
    allocated = []

    def page_locked(like):
        allocated.append(like.shape)
        return torch.empty(like.shape, dtype=like.dtype)

    monkeypatch.setattr(stability, "_page_locked", page_locked)
    monkeypatch.setattr(stability, "_on_device", lambda t: t.dim() > 0)  # weights "on the GPU"; 0-d counters not

    torch.manual_seed(0)
    gpt = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2))
    optimizer = torch.optim.AdamW(gpt.parameters(), lr=0.1)
    gpt(torch.randn(5, 4)).sum().backward()
    optimizer.step()
    snapshot = Snapshot(pinned=True)
    snapshot.take(1, gpt, optimizer)
    first = len(allocated)
    assert first == 4 + 2 * 4  # four weights, and AdamW's two moments of each (the 0-d steps are cloned)
    optimizer.step()
    snapshot.take(2, gpt, optimizer)
    assert len(allocated) == first  # refreshed in place: no new page-locked allocation
    kept = {k: v.clone() for k, v in gpt.state_dict().items()}
    kept_moment = optimizer.state[gpt[0].weight]["exp_avg"].clone()
    optimizer.step()
    assert not torch.equal(gpt[0].weight, kept["0.weight"])
    assert snapshot.restore(gpt, optimizer) == 2
    for key, value in gpt.state_dict().items():
        assert torch.equal(value, kept[key]), key
    assert torch.equal(optimizer.state[gpt[0].weight]["exp_avg"], kept_moment)
