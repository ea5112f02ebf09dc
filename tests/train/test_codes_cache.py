"""The DVAE code cache: same losses as computing codes per step, keyed by audio hash and DVAE weights."""

from __future__ import annotations

import copy

import pytest
import torch

from tests.train.trainhelpers import read_metrics, small_config, train_lines
from xtts_ft.model import model_limits
from xtts_ft.train.codes_cache import build_codes_cache, dvae_fingerprint
from xtts_ft.train.data import Limits, load_clips


def test_cached_codes_give_the_same_losses_as_per_step_codes(trainer, tmp_path):
    runs = {}
    for cached in (True, False):
        run = tmp_path / f"cache_{cached}"
        cfg = small_config(run, training={"max_steps": 4, "cache_dvae_codes": cached},
                           evaluation={"eval_at_start": True})
        trainer(cfg, seed_cache=False)
        runs[cached] = read_metrics(run)
    assert len(list((tmp_path / "cache_True" / "cache" / "dvae_codes").glob("*.npy"))) == 16  # 12 train + 4 eval clips
    assert not (tmp_path / "cache_False" / "cache").exists()
    with_cache, without = (train_lines(tmp_path / f"cache_{c}") for c in (True, False))
    for a, b in zip(with_cache, without, strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-4)
    evals = [[r["eval_loss"] for r in runs[c] if r.get("split") == "eval"] for c in (True, False)]
    assert evals[0] == pytest.approx(evals[1], rel=1e-5) and len(evals[0]) == 2


def test_cache_is_reused_and_keyed_by_the_dvae(built_model, dataset, tokenizer, tmp_path):
    limits = Limits(**model_limits(built_model.xtts))
    clips, _ = load_clips(dataset[0], tokenizer, "am", limits, progress=False)
    device = torch.device("cpu")
    paths = build_codes_cache(built_model, clips[:3], tmp_path, device, progress=False)
    stamps = [p.stat().st_mtime_ns for p in paths]
    assert build_codes_cache(built_model, clips[:3], tmp_path, device, progress=False) == paths
    assert [p.stat().st_mtime_ns for p in paths] == stamps  # nothing recomputed
    assert all(p.name.startswith(c.sha256[:24]) for p, c in zip(paths, clips))
    other = copy.deepcopy(built_model)
    with torch.no_grad():
        next(other.dvae.parameters()).add_(0.01)
    assert dvae_fingerprint(other) != dvae_fingerprint(built_model)
    assert set(build_codes_cache(other, clips[:3], tmp_path, device, progress=False)).isdisjoint(paths)
