"""The recipe's shape: attributes declared up front, setup returns a frozen session of values (batch plan, max_steps
from epochs) and the moving parts training changes, the config it was given stays;
and its progress (the best score included) survives a stop and a resume."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
import torch

from tests.fixtures.faults import patched_recipe
from tests.train.trainhelpers import read_events, small_config
from xtts_ft.checkpoint_store import CheckpointStore
from xtts_ft.pipeline import training_handles
from xtts_ft.run_folder import claim_run_folder
from xtts_ft.train import TrainInputs
from xtts_ft.train.distributed import setup_distributed
from xtts_ft.train.loop import BatchPlan, FineTuneRecipe
from xtts_ft.train.progress import Progress
from xtts_ft.training_state import TrainingState


def _recipe(cfg, run: Path, tiny_base, vocab, tokenizer, dataset) -> FineTuneRecipe:
    record = claim_run_folder(run, fingerprint=None, resume=cfg.checkpoint.resume)
    handles = training_handles(cfg, setup_distributed("cpu"), vocab[0], record, tokenizer)
    inputs = TrainInputs(base=tiny_base, vocab_path=vocab[0], base_vocab_size=vocab[1], train_csv=dataset[0],
                         eval_csv=dataset[1], run_dir=run)
    return FineTuneRecipe(cfg, inputs, handles=handles)


def test_setup_returns_a_frozen_session_and_the_moving_parts_and_keeps_the_config(tiny_base, vocab, tokenizer, dataset,
                                                                                 model_factory, codes_cache, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(codes_cache, run / "cache" / "dvae_codes")
    # 12 clips x 2 epochs at 8 clips per step = 3 steps, before max_steps 50: the epochs end the run
    cfg = small_config(run, training={"max_steps": 50, "max_epochs": 2, "batch_size": 2, "effective_batch_size": 8})
    recipe = _recipe(cfg, run, tiny_base, vocab, tokenizer, dataset)
    declared = set(vars(recipe))
    try:
        with patched_recipe(model_factory):
            session, parts = recipe.setup()
        assert set(vars(recipe)) == declared  # every attribute setup fills was declared in __init__
        assert recipe.session is session and recipe.parts is parts
        assert recipe.cfg is cfg and cfg.training.max_steps == 50 and cfg.training.grad_accum_steps == 1  # as given
        assert session.plan == BatchPlan(batch_size=2, grad_accum_steps=4, world_size=1)
        assert session.plan.samples_per_step == 8
        assert session.max_steps == 3 and session.training.grad_accum_steps == 4  # what checkpoints record
        assert recipe.effective_config().training is session.training
        assert parts.metrics.max_steps == 3
        assert recipe.optimizer is parts.opt.optimizer and len(session.data.train_clips) == 12
        with pytest.raises(dataclasses.FrozenInstanceError):
            session.plan = None
        with pytest.raises(dataclasses.FrozenInstanceError):
            session.data.train_clips = []
        # the session holds values only: what training changes in place is in the moving parts
        kinds = {type(getattr(session, f.name)) for f in dataclasses.fields(session)}
        assert not kinds & {type(getattr(parts, f.name)) for f in dataclasses.fields(parts)}
        assert not any(issubclass(kind, (torch.nn.Module, torch.optim.Optimizer)) for kind in kinds)
    finally:
        recipe.cleanup()


def test_the_recipe_needs_setup_first(tiny_base, vocab, tokenizer, dataset, tmp_path):
    run = tmp_path / "run"
    recipe = _recipe(small_config(run), run, tiny_base, vocab, tokenizer, dataset)
    with pytest.raises(RuntimeError, match="setup"):
        recipe.session  # noqa: B018
    recipe.cleanup()  # nothing built: nothing to close


def test_a_run_sized_by_epochs_trains_those_steps_and_records_them(trainer, tmp_path):
    run = tmp_path / "run"
    cfg = small_config(run, training={"max_steps": 50, "max_epochs": 1, "batch_size": 4})  # 12 clips: 3 steps
    result = trainer(cfg)
    assert result.step == 3 and cfg.training.max_steps == 50
    assert CheckpointStore.load_state(result.last_checkpoint).training_config["max_steps"] == 3


CER_AT_STEP = {1: 0.30, 2: 0.20, 3: 0.50, 4: 0.60}  # the best evaluation comes before the stop; later ones are worse


def cer_hook(step, model):
    return {"sample_cer": CER_AT_STEP[step]}


def test_a_resumed_run_keeps_its_best_score(trainer, tmp_path):
    """best_metric cer: after a resume, worse evaluations are not declared best and save no extra checkpoint."""
    run = tmp_path / "run"
    sections = dict(evaluation={"every_steps": 1}, checkpoint={"every_steps": 100, "keep_last": 10,
                                                              "best_metric": "cer"})
    first = trainer(small_config(run, training={"max_steps": 2}, **sections), eval_hook=cer_hook)
    assert first.step == 2 and first.best_checkpoint.name == "step_000002"
    state = CheckpointStore.load_state(first.last_checkpoint)
    assert state.best_score == 0.20 and state.best_step == 2

    resumed = trainer(small_config(run, training={"max_steps": 4}, **sections), eval_hook=cer_hook)
    assert resumed.step == 4
    # step 3 (CER 0.50) is no new best: nothing saved there; step 4 is saved only as the run's final step
    assert [c.step for c in CheckpointStore.of_run(run).list()] == [1, 2, 4]
    assert resumed.best_checkpoint.name == "step_000002"
    assert [e["step"] for e in read_events(run) if e.get("event") == "checkpoint"] == [1, 2, 4]
    final = CheckpointStore.load_state(resumed.last_checkpoint)
    assert final.best_score == 0.20 and final.best_step == 2


def test_progress_state_round_trips_and_older_checkpoints_have_no_best():
    start = Progress(step=5, data_position=(1, 3), lr_factor=0.5)
    progress, better = start.with_evaluation(2.0, {"sample_cer": 0.4}, "cer")
    assert better and start.best_score is None  # a new Progress; the old one stays as it was
    progress, better = progress.with_evaluation(1.0, {"sample_cer": 0.4}, "cer")
    assert not better  # a tie is no improvement
    assert (progress.first_eval_loss, progress.last_eval_loss, progress.best_eval_loss) == (2.0, 1.0, 1.0)
    state = TrainingState(**progress.state_dict(), gpt={"w": torch.ones(1)}, sampler={}, rng=[{}], stability={},
                          precision="fp32", training_config={}, vocab_fingerprint="v", base_vocab_size=1)
    loaded = Progress.from_checkpoint(TrainingState.from_dict(state.to_dict(), "x"), metric="cer", position=(1, 3))
    assert (loaded.step, loaded.saved_step, loaded.data_position, loaded.lr_factor) == (5, 5, (1, 3), 0.5)
    assert (loaded.best_score, loaded.best_step, loaded.best_eval_loss) == (0.4, 5, 1.0)

    old = {k: v for k, v in state.to_dict().items() if k not in ("best_score", "best_step")}
    old["format"] = 1
    for metric, best in ("cer", None), ("eval_loss", 1.0):  # eval_loss: format 1 always carried best_eval_loss
        loaded = Progress.from_checkpoint(TrainingState.from_dict(old, "x"), metric=metric, position=(0, 0))
        assert loaded.best_score == best


def test_the_training_package_never_reaches_up_to_the_run_folder():
    """The pipeline claims the run folder and hands the record in: no module of xtts_ft/train imports run_folder
    or the pipeline (at the top or inside a function)."""
    import ast

    import xtts_ft.train

    found = []
    for path in sorted(Path(xtts_ft.train.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module else
                     [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            found += [f"{path.name}: {n}" for n in names if n in ("xtts_ft.run_folder", "xtts_ft.pipeline")]
    assert found == []
