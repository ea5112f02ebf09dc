"""The whole pipeline on CPU with the tiny model and the bundled demo data, as a user runs it.

The session's demo run (tests/fixtures/demo_run.py: headless_train.py for a few dozen steps) and its
outputs, then the same command with a larger step budget: stages whose inputs did not change are
skipped and training continues from the saved step instead of starting again.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.fixtures.demo_run import DEMO_STEPS, run_demo

pytestmark = pytest.mark.slow  # the demo run (a full pipeline, once per session) and a continued run


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def test_smoke_run_writes_every_output(demo_run):
    run_dir = demo_run.run_dir
    assert (run_dir / "config.yaml").is_file()
    assert (run_dir / "data" / "metadata_train.csv").is_file()
    report = json.loads((run_dir / "data" / "report.json").read_text())
    assert report["kept"] >= 40
    assert (run_dir / "tokenizer" / "vocab.json").is_file()
    ckpt = demo_run.last_checkpoint
    assert (ckpt / "training_state.pt").is_file() and (ckpt / "vocab.json").is_file()
    wavs = list((run_dir / "samples").rglob("*.wav"))
    assert wavs, "evaluation samples"
    train_lines = [m for m in metrics(run_dir) if m.get("split") != "eval"]
    assert train_lines[-1]["step"] == DEMO_STEPS
    for key in ("step", "loss", "loss_text_ce", "loss_mel_ce", "lr", "grad_norm", "loss_scale", "skipped_steps"):
        assert key in train_lines[-1], key
    assert list((run_dir / "tensorboard").iterdir())
    html = (run_dir / "report.html").read_text(encoding="utf-8")
    assert "<audio" in html
    # The demo's recogniser (configs/demo.yaml: the small committed one) heard every sample.
    last_eval = [m for m in metrics(run_dir) if m.get("split") == "eval"][-1]
    assert 0.0 <= last_eval["sample_cer"] and -1.0 <= last_eval["sample_speaker_similarity"] <= 1.0
    assert "sample_stop_rate_short" in last_eval and "sample_cer_short" in last_eval
    # listened to (evaluation.quality): predicted quality against the recordings', and the tail rate
    assert 1.0 <= last_eval["sample_quality_mos"] <= 5.0 and 1.0 <= last_eval["reference_quality_mos"] <= 5.0
    assert last_eval["quality_mos_difference"] == pytest.approx(
        last_eval["sample_quality_mos"] - last_eval["reference_quality_mos"])
    assert "Predicted quality is DNSMOS" in html and "short-text tail rate" in html
    assert report["snr"]["measured"] == report["kept"] and report["snr"]["min"] > report["snr"]["min_snr_db"]
    assert "heard:" in html and "Character error rate" in html and "Speaker similarity" in html
    index = [json.loads(line) for line in (run_dir / "samples" / "index.jsonl").read_text().splitlines()]
    sample = index[-1]["samples"][0]
    # a tail where the sample is long enough to hold its text (the random model's first one is; at step 60 it may stop
    # before: no alignment, no tail)
    assert 0.0 <= index[0]["metrics"]["sample_tail_rate"] <= 1.0 and "sample_tail_rate_short" in index[0]["metrics"]
    assert all(s["tail_s"] is not None or s["duration_s"] < 0.5 for r in index for s in r["samples"])
    assert isinstance(sample["recognized_text"], str) and sample["cer"] is not None
    assert "report.html" in demo_run.stderr  # the closing summary names the outputs
    summary = json.loads((run_dir / "summary.json").read_text())  # the end names the best checkpoint and its step
    assert Path(summary["best_checkpoint"]).name == f"step_{summary['best_step']:06d}"
    assert f"(step {summary['best_step']}, by checkpoint.best_metric" in demo_run.stderr
    assert train_lines[-1]["epochs"] > 0 and train_lines[-1]["audio_hours"] > 0


def test_rerun_skips_unchanged_stages_and_continues_training(demo_run):
    more = DEMO_STEPS + 1  # one step more is enough to see it continue (and each step is paid for)
    with demo_run.changed_in_place() as run_dir:  # the stage records hold its path: a copy would be a new run
        out = run_demo(run_dir, demo_run.base_dir, more)
        assert "prepare: dataset unchanged" in out.stderr
        assert "tokenizer: inputs unchanged" in out.stderr
        steps = [m["step"] for m in metrics(run_dir) if m.get("split") != "eval"]
        assert steps[-1] == more
        assert steps.count(DEMO_STEPS) == 1, f"resumed after step {DEMO_STEPS} instead of starting again"
        assert (run_dir / "checkpoints" / f"step_{more:06d}").is_dir()


def test_a_new_normaliser_version_redoes_prepare_and_tokenizer(demo_run, tiny_base_dir, tmp_path, monkeypatch,
                                                              caplog):
    """Transcripts normalised by an older front-end are not reused: the stages hash NORMALIZER_VERSION."""
    from xtts_ft import pipeline
    from xtts_ft.base_model import resolve_base_model
    from xtts_ft.config import load_config

    run_dir = demo_run.run_dir
    copy = tmp_path / "run"
    for stage in ("data", "tokenizer"):
        shutil.copytree(run_dir / stage, copy / stage)
    monkeypatch.chdir(REPO_ROOT)
    cfg = load_config(REPO_ROOT / "configs" / "demo.yaml", [f"run.output_dir={copy}", f"base_model.source={tiny_base_dir}"])
    base = resolve_base_model(cfg.base_model)
    pipeline.tokenizer_stage(cfg, base, pipeline.prepare_stage(cfg, base))  # the copy's new paths: vocab redone once
    caplog.set_level("INFO")
    pipeline.tokenizer_stage(cfg, base, pipeline.prepare_stage(cfg, base))
    assert "prepare: dataset unchanged" in caplog.text and "tokenizer: inputs unchanged" in caplog.text
    caplog.clear()
    monkeypatch.setattr(pipeline, "NORMALIZER_VERSION", pipeline.NORMALIZER_VERSION + 1)
    pipeline.tokenizer_stage(cfg, base, pipeline.prepare_stage(cfg, base))
    assert "unchanged" not in caplog.text and "tokenizer: 800 new tokens" in caplog.text


def test_score_prints_cer_similarity_and_stop_rate(demo_run, capsys, monkeypatch, tmp_path):
    from xtts_ft.cli import main

    run_dir = demo_run.run_dir
    monkeypatch.chdir(REPO_ROOT)  # configs/demo.yaml names its recogniser relative to the repository
    voice = sorted((run_dir / "data" / "wavs").glob("*.wav"))[0]
    code = main(["score", "--config", "configs/demo.yaml", "--model", str(demo_run.last_checkpoint),
                 "--speaker-wav", str(voice), "--out", str(tmp_path / "score"),
                 "--set", "evaluation.sentences=['ሰላም።', 'ስምህ ማን ነው?']", "--set", "evaluation.max_new_tokens=10"])
    out = capsys.readouterr().out
    assert code == 0
    rows = [line.split("\t") for line in out.splitlines()]
    assert rows[0][:5] == ["sample", "bucket", "ended", "CER", "similarity"] and len(rows[1:3]) == 2
    means = {r[0]: float(r[1]) for r in rows if len(r) == 2}
    assert means["sample_cer"] >= 0 and 0 <= means["sample_stop_rate"] <= 1 and "sample_speaker_similarity" in means
