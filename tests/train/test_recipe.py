"""The recipe's shape: attributes declared up front, setup builds a batch plan, the config it was given stays."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.train.trainhelpers import small_config
from xtts_ft.train.hooks import TrainingHooks
from xtts_ft.train.loop import BatchPlan, FineTuneRecipe


def test_setup_adds_no_attribute_and_keeps_the_config(tiny_base, vocab, tokenizer, dataset, model_factory,
                                                      codes_cache, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(codes_cache, run / "cache" / "dvae_codes")
    cfg = small_config(run, training={"max_steps": 2, "batch_size": 2, "effective_batch_size": 8})
    recipe = FineTuneRecipe(cfg, base=tiny_base, vocab_path=vocab[0], base_vocab_size=vocab[1],
                            train_csv=dataset[0], eval_csv=dataset[1], run_dir=Path(run),
                            hooks=TrainingHooks(tokenizer=tokenizer, model_factory=model_factory))
    declared = set(vars(recipe))
    try:
        recipe.setup()
        assert set(vars(recipe)) == declared  # every attribute setup fills was declared in __init__
        assert recipe.cfg is cfg and cfg.training.grad_accum_steps == 1  # not replaced halfway
        assert recipe.plan == BatchPlan(batch_size=2, grad_accum_steps=4, world_size=1)
        assert recipe.plan.samples_per_step == 8 and recipe.effective_training().grad_accum_steps == 4
        assert recipe.model is not None and recipe.optimizer is not None and len(recipe.train_clips) == 12
    finally:
        recipe.cleanup()
