"""Stop at the best: early stopping, the overfitting detector, runs sized in epochs, eval loss per language."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
import soundfile as sf

from tests.train.trainhelpers import read_events, read_metrics, small_config, train_lines
from xtts_ft.checkpoint_store import CheckpointStore
from xtts_ft.config import ConfigError, EarlyStoppingConfig, config_from_dict
from xtts_ft.data import read_metadata
from xtts_ft.train.early_stopping import EarlyStopping, OverfitDetector, RunJudges


# ---------------------------------------------------------------- the judges, on numbers
def test_early_stopping_counts_evaluations_without_a_large_enough_improvement():
    stopper = EarlyStopping(patience=2, min_improvement=0.1)
    assert not stopper.update(10, 3.0)
    assert not stopper.update(20, 2.95)  # 0.05 lower: not an improvement by min_improvement, but the best now
    assert not stopper.update(30, None)  # a metric this evaluation could not compute: neither better nor worse
    assert stopper.update(40, 2.99)
    # the best is the best checkpoint's (any lower score: checkpoint_store.is_better), not the last improvement
    assert (stopper.best_step, stopper.best_score, stopper.evals_without_improvement) == (20, 2.95, 2)


def test_early_stopping_names_the_checkpoint_kept_as_best(trainer, tmp_path, caplog):
    """Scores that keep falling by less than min_improvement: the run stops, and its line and event name the
    best checkpoint that retention kept (step 6), not the first score (step 2, deleted by keep_last)."""
    caplog.set_level(logging.WARNING, logger="xtts_ft")
    cers = {2: 0.50, 4: 0.497, 6: 0.495, 8: 0.60}
    run = tmp_path / "run"
    stopping = EarlyStoppingConfig(enabled=True, patience=2, min_improvement=0.01)
    cfg = small_config(run, training={"max_steps": 20, "early_stopping": stopping}, evaluation={"every_steps": 2},
                       checkpoint={"every_steps": 1000, "keep_last": 1, "best_metric": "cer"})
    result = trainer(cfg, eval_hook=lambda step, model: {"sample_cer": cers.get(step, 0.9)})

    assert result.stopped_early and result.step == 6  # 4 and 6: two evaluations less than 0.01 better
    assert result.best_checkpoint == run / "checkpoints" / "step_000006" and result.best_step == 6
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_000006"]  # step 2 was deleted
    (stop,) = [e for e in read_events(run) if e["event"] == "early_stop"]
    assert stop["best_step"] == 6 and stop["best_score"] == pytest.approx(0.495)
    assert stop["best_checkpoint"] == str(result.best_checkpoint)
    assert (f"its best was 0.495 at step 6; the best checkpoint (checkpoint.best_metric cer) is "
            f"{result.best_checkpoint}") in caplog.text
    from xtts_ft.evaluate.report import render_report

    assert "the best was step 6 (the best checkpoint kept: step_000006)" in render_report(run)


def test_a_resumed_stopper_continues_the_patience_count():
    first = EarlyStopping(patience=3)
    for step, score in ((1, 2.0), (2, 2.5), (3, 2.6)):
        first.update(step, score)
    resumed = EarlyStopping(patience=3)
    resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))  # as plain data, like the checkpoint
    assert resumed.update(4, 2.7)  # the third evaluation without improvement, counted across the resume
    assert resumed.best_step == 1


def test_the_overfit_detector_needs_a_falling_training_loss_and_says_it_once():
    flat = OverfitDetector(evals=2)
    for step, score, train in ((1, 3.0, 1.0), (2, 3.5, 1.0), (3, 3.6, 1.1)):
        assert flat.update(step, score, train) is None  # eval worse but training loss not falling: no finding
    falling = OverfitDetector(evals=2)
    assert falling.update(1, 3.0, None) is None  # the evaluation before step 1 has no training loss
    assert falling.update(2, 3.4, 0.9) is None
    finding = falling.update(3, 3.9, 0.5)
    assert finding["best_step"] == 1 and finding["evals_worse"] == 2 and finding["train_loss_to"] == 0.5
    assert falling.update(4, 4.5, 0.3) is None  # once per run
    again = OverfitDetector(evals=2)
    again.load_state_dict(falling.state_dict())
    assert again.update(5, 5.0, 0.1) is None and again.finding["at_step"] == 3


def test_early_stopping_config_is_a_checked_sub_section(tmp_path):
    raw = {"dataset": {"path": str(tmp_path)}, "evaluation": {"every_steps": 0},
           "training": {"early_stopping": {"enabled": True, "patiense": 2}, "max_epochs": 0}}
    with pytest.raises(ConfigError) as err:
        config_from_dict(raw)
    text = str(err.value)
    assert "training.early_stopping.patiense: unknown key (did you mean 'patience'?)" in text
    assert "training.early_stopping: needs evaluations during training" in text
    assert "training.max_epochs: must be > 0" in text
    ok = config_from_dict({"dataset": {"path": str(tmp_path)},
                           "training": {"early_stopping": {"enabled": True, "patience": 5}}})
    assert ok.training.early_stopping == EarlyStoppingConfig(enabled=True, patience=5)


def test_the_amharic_config_stops_early():
    from xtts_ft.config import load_config

    cfg = load_config(Path(__file__).resolve().parents[2] / "configs" / "amharic.yaml",
                      overrides=["dataset.path=."])
    assert cfg.training.early_stopping.enabled


# ---------------------------------------------------------------- real (tiny) runs
@pytest.fixture
def run_on(tiny_base, vocab, tokenizer, model_factory, codes_cache):
    """``run_on(cfg, train_csv, eval_csv)``: run_training on the tiny model with any pair of CSVs."""
    from tests.fixtures.faults import patched_recipe
    from xtts_ft.pipeline import run_training
    from xtts_ft.train import TrainInputs

    def run(cfg, train_csv: Path, eval_csv: Path):
        run_dir = Path(cfg.run.output_dir)
        shutil.copytree(codes_cache, run_dir / "cache" / "dvae_codes", dirs_exist_ok=True)  # keyed by audio hash
        inputs = TrainInputs(base=tiny_base, vocab_path=vocab[0], base_vocab_size=vocab[1], train_csv=train_csv,
                             eval_csv=eval_csv, run_dir=run_dir)
        with patched_recipe(model_factory):
            return run_training(cfg, inputs, tokenizer=tokenizer)

    return run


def _csv(path: Path, rows: list[dict], language: bool = False) -> Path:
    """A metadata CSV of ``rows`` (from read_metadata: absolute audio paths), optionally with a language column."""
    lines = ["audio_file|text|speaker_name" + ("|language" if language else "")]
    for r in rows:
        cells = [r["audio_file"], r["text"], r.get("speaker_name") or "spk0"]  # read_metadata: absolute paths
        lines.append("|".join(cells + ([r["language"]] if language else [])))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_a_run_driven_to_overfit_stops_at_the_patience_and_keeps_the_best(run_on, dataset, tiny_base, tmp_path,
                                                                         caplog):
    """Two training clips at a high LR, evaluated on four others every two steps: the eval loss turns up."""
    caplog.set_level(logging.INFO, logger="xtts_ft")
    train_csv = _csv(tmp_path / "train2.csv", read_metadata(dataset[0])[:2])
    run = tmp_path / "run"
    patience = 3
    cfg = small_config(run, training={"max_steps": 60, "lr": 1e-2, "warmup_steps": 0, "log_every": 2,
                                      "overfit_warning_evals": 2,
                                      "early_stopping": EarlyStoppingConfig(enabled=True, patience=patience)},
                       evaluation={"every_steps": 2}, checkpoint={"every_steps": 1000, "keep_last": 1})
    result = run_on(cfg, train_csv, dataset[1])

    assert result.stopped_early and result.step < 60
    evals = {r["step"]: r["eval_loss"] for r in read_metrics(run) if r.get("split") == "eval"}
    best = min(evals, key=evals.get)
    after = [s for s in sorted(evals) if s > best]
    assert after == [best + 2 * i for i in range(1, patience + 1)] and after[-1] == result.step  # exactly the patience
    assert result.best_step == best and result.best_checkpoint.name == f"step_{best:06d}"
    assert (result.best_checkpoint / "training_state.pt").is_file()  # kept, although keep_last is 1
    events = read_events(run)
    stop = [e for e in events if e["event"] == "early_stop"]
    assert len(stop) == 1 and stop[0]["best_step"] == best and stop[0]["step"] == result.step
    overfit = [e for e in events if e["event"] == "overfitting"]
    assert len(overfit) == 1 and overfit[0]["best_step"] == best and overfit[0]["at_step"] <= result.step
    assert overfit[0]["train_loss_to"] < overfit[0]["train_loss_from"]
    # the last checkpoint carries the judges' state, so a resume continues the count
    saved = CheckpointStore.load_state(result.last_checkpoint).early_stopping
    assert saved["stopper"]["best_step"] == best and saved["stopper"]["evals_without_improvement"] == patience
    judges = RunJudges(cfg.training, cfg.checkpoint.best_metric)
    judges.load_state_dict(saved)
    assert judges.stopper.should_stop and judges.overfit.finding["best_step"] == best
    again = run_on(cfg, train_csv, dataset[1])  # the same command again (resume: auto) trains nothing more
    assert again.stopped_early and again.step == result.step and again.best_step == best
    assert [e["event"] for e in read_events(run)].count("overfitting") == 1

    from xtts_ft.evaluate.report import render_report

    page = render_report(run)
    assert f"The best checkpoint is step {best}" in page and f"Stopped early at step {result.step}" in page
    assert f"best checkpoint (eval_loss): {result.best_checkpoint} (step {best})" in caplog.text  # the console
    from xtts_ft.evaluate.export import EXPORT_META
    from xtts_ft.pipeline import _export_best  # training.export_best_at_end

    exported = _export_best(result.best_checkpoint, run, tiny_base)
    assert exported == run / "exports" / f"step_{best:06d}"
    assert json.loads((exported / EXPORT_META).read_text())["step"] == best


def test_max_epochs_sizes_the_run_and_epochs_and_hours_are_logged(trainer, dataset, tmp_path):
    run = tmp_path / "run"
    # 12 clips, batch 2: one epoch is 6 steps, before max_steps 40
    result = trainer(small_config(run, training={"max_steps": 40, "max_epochs": 1.0, "log_every": 3}))
    assert result.step == 6
    lines = train_lines(run)
    assert [r["step"] for r in lines] == [3, 6]
    assert [r["epochs"] for r in lines] == [0.5, 1.0]
    seconds = sum(sf.info(r["audio_file"]).frames for r in read_metadata(dataset[0])) / 22050
    assert lines[-1]["audio_hours"] == pytest.approx(seconds / 3600, rel=1e-6)


def test_a_two_language_run_shows_eval_loss_per_language(run_on, dataset, tmp_path):
    rows = read_metadata(dataset[1])
    for i, r in enumerate(rows):
        r["language"] = "en" if i % 2 else "am"
    eval_csv = _csv(tmp_path / "eval2.csv", rows, language=True)
    run = tmp_path / "run"
    run_on(small_config(run, training={"max_steps": 2}), dataset[0], eval_csv)
    evals = [r for r in read_metrics(run) if r.get("split") == "eval"]
    assert evals and all(isinstance(r.get("eval_loss_am"), float) and isinstance(r.get("eval_loss_en"), float)
                         for r in evals)
    assert evals[-1]["eval_loss_am"] != evals[-1]["eval_loss_en"]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tags = EventAccumulator(str(run / "tensorboard")).Reload().Tags()["scalars"]
    assert {"eval/loss_am", "eval/loss_en"} <= set(tags)
