"""The training-state record: typed, versioned, and a checkpoint written before it existed still loads."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from xtts_ft.checkpoint_store import CheckpointStore
from xtts_ft.errors import CheckpointError
from xtts_ft.layout import CheckpointLayout
from xtts_ft.tokenizer.fingerprint import vocab_fingerprint
from xtts_ft.training_state import FORMAT, TrainingState

# Written by the code of commit cdd6580 (tests/assets/make_format1_checkpoint.py): weights only.
OLD = Path(__file__).resolve().parents[1] / "assets" / "checkpoint_format1" / "step_000002"


@pytest.fixture
def old_checkpoint(tmp_path) -> Path:
    folder = tmp_path / "run" / "checkpoints" / OLD.name
    shutil.copytree(OLD, folder)
    return folder


def test_an_old_checkpoint_loads_into_the_record(old_checkpoint):
    state = CheckpointStore.load_state(old_checkpoint)  # sha256 verified, weights_only
    assert isinstance(state, TrainingState) and state.step == 2 and state.optimizer is None
    assert state.vocab_fingerprint == vocab_fingerprint(CheckpointLayout(old_checkpoint).vocab)
    assert state.precision == "fp32" and state.sampler["batch_index"] == 2 and len(state.rng) == 1
    assert "text_embedding.weight" in state.gpt and state.training_config["max_steps"] == 2
    raw = torch.load(CheckpointLayout(old_checkpoint).state, map_location="cpu", weights_only=True)
    again = state.to_dict()
    assert set(again) == set(raw)  # the record writes exactly the keys the old code wrote
    assert all(torch.equal(again["gpt"][k], raw["gpt"][k]) for k in raw["gpt"])


def test_an_old_checkpoint_resumes_and_exports(old_checkpoint, tiny_base, vocab, built_model, tmp_path):
    import copy

    from xtts_ft.config import StabilityConfig, TrainingConfig
    from xtts_ft.evaluate.export import export_from_checkpoint
    from xtts_ft.train.precision import PrecisionPolicy
    from xtts_ft.train.resume import apply_checkpoint, check_compatible
    from xtts_ft.train.schedule import build_optimizer
    from xtts_ft.train.stability import StabilityGuard, gpt_state_dict

    state = CheckpointStore.load_state(old_checkpoint)
    model = copy.deepcopy(built_model)
    fingerprint = vocab_fingerprint(vocab[0])
    check_compatible(state, old_checkpoint, vocab_fingerprint=fingerprint, gpt=model.gpt)
    tcfg = TrainingConfig()
    point = apply_checkpoint(
        state, old_checkpoint, gpt=model.gpt, optimizer=build_optimizer(model.gpt, tcfg, torch.device("cpu")),
        guard=StabilityGuard(StabilityConfig()), tcfg=tcfg, policy=PrecisionPolicy("fp32", "cpu"),
        device=torch.device("cpu"), rank=0, world_size=1, sampler_key=dict(state.sampler),
    )
    assert point.step == 2 and point.position == (state.sampler["epoch"], state.sampler["batch_index"])
    loaded = gpt_state_dict(model.gpt)
    assert all(torch.equal(loaded[k], v) for k, v in state.gpt.items())

    out = export_from_checkpoint(old_checkpoint, tmp_path / "export", tiny_base)
    meta = json.loads((out / "xtts_ft_meta.json").read_text(encoding="utf-8"))
    assert meta["step"] == 2 and meta["text"] == {"fold_homophones": True, "char_limit": 200}
    exported = torch.load(out / "model.pth", map_location="cpu", weights_only=True)["model"]
    assert torch.equal(exported["gpt.text_embedding.weight"], state.gpt["text_embedding.weight"])


def test_the_record_round_trips_and_refuses_what_it_is_not():
    state = TrainingState(step=7, epoch=1, gpt={"w": torch.ones(2)}, sampler={"epoch": 1}, rng=[{}], stability={},
                          lr_factor=0.5, precision="bf16", training_config={}, vocab_fingerprint="ab",
                          base_vocab_size=3, optimizer={"state": {}, "param_groups": []})
    data = state.to_dict()
    assert data["format"] == FORMAT and TrainingState.from_dict(data, "x").optimizer == state.optimizer
    assert "optimizer" not in state.without_optimizer().to_dict()
    for bad, message in ([1, 2], "found 'list'"), ({**data, "format": 99}, "found 99"), \
            ({k: v for k, v in data.items() if k != "gpt"}, "without gpt"):
        with pytest.raises(CheckpointError, match=message) as err:
            TrainingState.from_dict(bad, "runs/x/training_state.pt")
        assert str(err.value).startswith("runs/x/training_state.pt: ")
