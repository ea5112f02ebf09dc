"""The DVAE stage (dvae.finetune): lowers held-out reconstruction loss, resumes exactly, feeds the GPT stage."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest
import torch

from tests.conftest import REPO_ROOT
from tests.train.trainhelpers import small_config
from xtts_ft.layout import DVAE_FILE, DVAE_STATE_FILE, STAGE_REPORT, RunLayout
from xtts_ft.model import build_training_model, model_limits, new_dvae
from xtts_ft.stop_signals import StopRequested
from xtts_ft.train import dvae_stage as stage_module
from xtts_ft.train.codes_cache import build_codes_cache, dvae_fingerprint
from xtts_ft.train.data import Limits, load_clips
from xtts_ft.train.dvae_stage import dvae_stage, dvae_summary, fine_tuned_dvae

DEMO = REPO_ROOT / "datasets" / "amharic_demo"


@pytest.fixture(scope="module")
def demo_data(tmp_path_factory):
    """A prepared data folder from the bundled demo: 6 training and 2 held-out espeak-ng clips."""
    root = tmp_path_factory.mktemp("demo_data")
    (root / "wavs").mkdir()
    rows = (DEMO / "metadata.csv").read_text(encoding="utf-8").splitlines()
    header, rows = rows[0], rows[1:9]
    for row in rows:
        shutil.copyfile(DEMO / row.split("|")[0], root / row.split("|")[0])
    (root / "metadata_train.csv").write_text("\n".join([header, *rows[:6]]) + "\n", encoding="utf-8")
    (root / "metadata_eval.csv").write_text("\n".join([header, *rows[6:]]) + "\n", encoding="utf-8")
    return root


def dvae_config(run_dir):
    return small_config(run_dir, dvae={"finetune": True, "steps": 2, "lr": 1e-4, "warmup_steps": 0, "batch_size": 1,
                                       "crop_s": 0.25, "eval_clips": 2, "every_steps": 100})


@pytest.fixture(scope="module")
def uninterrupted(tiny_base, demo_data, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("dvae_run")
    return run_dir, dvae_stage(dvae_config(run_dir), tiny_base, demo_data)


def test_the_stage_lowers_held_out_reconstruction_loss(uninterrupted):
    run_dir, result = uninterrupted
    assert result.steps == 2 and result.skipped_steps == 0
    assert result.eval_loss_after < result.eval_loss_before
    report = json.loads((RunLayout(run_dir).dvae / STAGE_REPORT).read_text())
    assert report["eval_loss_before"] == result.eval_loss_before and report["eval_clips"] == 2
    assert "held-out reconstruction loss" in dvae_summary(run_dir)
    state = torch.load(result.dvae_pth, weights_only=True)
    assert set(state) == set(new_dvae(258).state_dict())  # the keys of coqui/XTTS-v2's dvae.pth


def test_a_stopped_stage_resumes_where_it_stopped(uninterrupted, tiny_base, demo_data, tmp_path, monkeypatch):
    checks = iter([False, True])  # a stop is requested before the second step
    monkeypatch.setattr(stage_module, "stop_requested", lambda: next(checks, False))
    cfg = dvae_config(tmp_path)
    with pytest.raises(StopRequested, match="DVAE stage at step 1"):
        dvae_stage(cfg, tiny_base, demo_data)
    saved = torch.load(RunLayout(tmp_path).dvae / DVAE_STATE_FILE, weights_only=True)
    assert saved["step"] == 1 and not (RunLayout(tmp_path).dvae / DVAE_FILE).exists()
    resumed = dvae_stage(cfg, tiny_base, demo_data)  # continues at step 1 (the crops depend on the step only)
    assert resumed.steps == 2 and not (RunLayout(tmp_path).dvae / DVAE_STATE_FILE).exists()  # done: state removed
    a = torch.load(resumed.dvae_pth, weights_only=True)
    b = torch.load(uninterrupted[1].dvae_pth, weights_only=True)
    assert all(torch.equal(a[k], b[k]) for k in b)  # bit-identical to the run that was never stopped
    assert resumed.eval_loss_before == uninterrupted[1].eval_loss_before
    assert dvae_stage(cfg, tiny_base, demo_data).eval_loss_after == resumed.eval_loss_after  # done: reused


def test_the_gpt_stage_uses_the_fine_tuned_dvae_and_its_codes_are_recomputed(
        uninterrupted, tiny_base, vocab, tokenizer, built_model, dataset, tmp_path):
    run_dir, result = uninterrupted
    base = dataclasses.replace(tiny_base, dvae_pth=result.dvae_pth)  # what the pipeline hands the GPT stage
    assert fine_tuned_dvae(run_dir, base) == result.dvae_pth and fine_tuned_dvae(run_dir, tiny_base) is None
    model = build_training_model(base, vocab[0], tokenizer)
    tuned = torch.load(result.dvae_pth, weights_only=True)
    assert all(torch.equal(v, tuned[k]) for k, v in model.dvae.state_dict().items())
    assert dvae_fingerprint(model) != dvae_fingerprint(built_model)
    clips, _ = load_clips(dataset[0], tokenizer, "am", Limits(**model_limits(model.xtts)), progress=False)
    cpu = torch.device("cpu")
    old = build_codes_cache(built_model, clips[:2], tmp_path, cpu, progress=False)
    new = build_codes_cache(model, clips[:2], tmp_path, cpu, progress=False)
    assert set(new).isdisjoint(old) and all(p.is_file() for p in new)  # never the base DVAE's codes


def test_checkpoints_and_the_export_carry_the_fine_tuned_dvae(uninterrupted, tiny_base, vocab, built_model, tmp_path):
    from xtts_ft.checkpoint_store import CheckpointStore
    from xtts_ft.config import Config, dump_config
    from xtts_ft.evaluate.export import export_from_checkpoint
    from xtts_ft.tokenizer.fingerprint import vocab_fingerprint
    from xtts_ft.training_state import TrainingState

    run_dir, result = uninterrupted
    base = dataclasses.replace(tiny_base, dvae_pth=result.dvae_pth)
    state = TrainingState(step=1, epoch=0, gpt=built_model.xtts.gpt.state_dict(), sampler={}, rng=[], stability={},
                          lr_factor=1.0, precision="fp32", training_config={},
                          vocab_fingerprint=vocab_fingerprint(vocab[0]), base_vocab_size=vocab[1])
    ckpt = CheckpointStore.of_run(tmp_path / "run").save(
        state, vocab_path=vocab[0], write_config=lambda p: dump_config(Config(), p), base_model=str(tiny_base.root),
        dvae_pth=fine_tuned_dvae(run_dir, base))
    tuned = result.dvae_pth.read_bytes()
    assert (ckpt / DVAE_FILE).read_bytes() == tuned
    out = export_from_checkpoint(ckpt, tmp_path / "export", tiny_base)  # the base model as meta.json names it
    assert (out / DVAE_FILE).read_bytes() == tuned  # the checkpoint's DVAE, not the base model's
