"""Best checkpoint by eval loss, by CER, or by the documented CER + similarity combination."""

from __future__ import annotations

import pytest

from xtts_ft.config import config_from_dict
from xtts_ft.errors import ConfigError
from xtts_ft.evaluate.best_metric import best_score
from xtts_ft.train import checkpoint as ckpt
from xtts_ft.training_state import TrainingState


def _fake_checkpoints(run_dir, rows):
    """Real, verifying checkpoint folders (retention only counts good ones) with the given eval results."""
    vocab = run_dir / "vocab.json"
    run_dir.mkdir(parents=True, exist_ok=True)
    vocab.write_text("{}", encoding="utf-8")
    for step, eval_loss, metrics in rows:
        state = TrainingState(step=step, epoch=0, gpt={}, sampler={}, rng=[], stability={}, lr_factor=1.0,
                              precision="fp32", training_config={}, vocab_fingerprint="", base_vocab_size=0)
        ckpt.save_checkpoint(run_dir, state, {"eval_loss": eval_loss, "eval_metrics": metrics},
                             vocab_path=vocab, write_config=lambda p: p.write_text("{}\n", encoding="utf-8"))


ROWS = [
    (100, 2.0, {"sample_cer": 0.90, "sample_speaker_similarity": 0.80}),
    (200, 1.5, {"sample_cer": 0.30, "sample_speaker_similarity": 0.40}),  # lowest CER, poor voice
    (300, 1.2, {"sample_cer": 0.35, "sample_speaker_similarity": 0.90}),  # best combination
    (400, 1.0, {"sample_cer": 0.60, "sample_speaker_similarity": 0.85}),  # lowest loss, says less
    (500, None, None),  # no evaluation at this step: never best
]


def test_best_checkpoint_follows_the_chosen_metric(tmp_path):
    _fake_checkpoints(tmp_path, ROWS)
    assert ckpt.best_checkpoint(tmp_path).name == "step_000400"
    assert ckpt.best_checkpoint(tmp_path, metric="cer").name == "step_000200"
    # 0.30 + 0.5 * 0.60 = 0.60 against 0.35 + 0.5 * 0.10 = 0.40
    assert ckpt.best_checkpoint(tmp_path, metric="cer_similarity").name == "step_000300"


def test_keep_best_by_cer_survives_pruning(tmp_path):
    _fake_checkpoints(tmp_path, ROWS)
    ckpt.prune_checkpoints(tmp_path, keep_last=1, keep_best=True, metric="cer")
    assert [p.name for _, p in ckpt.list_checkpoints(tmp_path)] == ["step_000200", "step_000500"]


def test_scores():
    assert best_score("cer", {"sample_cer": 0.25, "eval_loss": 3.0}) == 0.25
    assert best_score("cer", {"eval_loss": 3.0}) is None
    assert best_score("cer_similarity", {"sample_cer": 0.2, "sample_speaker_similarity": 0.6}) == pytest.approx(0.4)
    assert best_score("eval_loss", {"eval_loss": float("nan")}) is None


def test_cer_metric_needs_the_recogniser():
    with pytest.raises(ConfigError, match="checkpoint.best_metric"):
        config_from_dict({"checkpoint": {"best_metric": "cer"}, "evaluation": {"recognize": False}})
    with pytest.raises(ConfigError, match="best_metric"):
        config_from_dict({"checkpoint": {"best_metric": "wer"}})
