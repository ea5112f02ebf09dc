"""A real (non-empty) dvae.pth loads into the XTTS-v2 DVAE; one of another model is refused in one line.

One real-size DVAE state (~51 M parameters, ~200 MB on disk) is made for the module: the size the
full-size random model writes and coqui/XTTS-v2 ships.
"""

from __future__ import annotations

import pytest
import torch

from xtts_ft.errors import ModelError
from xtts_ft.model import _build_dvae, new_dvae


@pytest.fixture(scope="module")
def real_dvae_state():
    state = new_dvae(1026).state_dict()
    # Move the weights away from the seeded initialisation, so a load that kept the seeded DVAE would show.
    return {k: v + 0.5 if v.is_floating_point() else v for k, v in state.items()}


@pytest.fixture(scope="module")
def dvae_pth(real_dvae_state, tmp_path_factory):
    path = tmp_path_factory.mktemp("dvae") / "dvae.pth"
    torch.save(real_dvae_state, path)
    return path


def test_real_dvae_weights_load(dvae_pth, real_dvae_state):
    dvae = _build_dvae(dvae_pth, 1026)
    loaded = dvae.state_dict()
    assert loaded.keys() == real_dvae_state.keys()
    assert all(torch.equal(loaded[k], real_dvae_state[k]) for k in loaded)
    assert tuple(loaded["codebook.embed"].shape) == (512, 1024)  # 1024 codes of 512 dims, as XTTS-v2
    assert sum(v.numel() for v in loaded.values()) > 40e6 and not any(p.requires_grad for p in dvae.parameters())


def test_dvae_of_another_shape_is_refused_in_one_line(real_dvae_state, tmp_path):
    wrong = dict(real_dvae_state)
    wrong["codebook.embed"] = torch.zeros(512, 256)  # a DVAE with 256 codes (e.g. the tiny model's)
    path = tmp_path / "dvae.pth"
    torch.save(wrong, path)
    with pytest.raises(ModelError) as info:
        _build_dvae(path, 1026)
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    assert "codebook.embed: (512, 256), expected (512, 1024)" in message and "same base model" in message


def test_dvae_missing_tensors_is_refused(real_dvae_state, tmp_path):
    partial = {k: v for i, (k, v) in enumerate(real_dvae_state.items()) if i % 2}
    path = tmp_path / "dvae.pth"
    torch.save(partial, path)
    with pytest.raises(ModelError, match=r"DVAE weights lack \d+ tensors"):
        _build_dvae(path, 1026)
