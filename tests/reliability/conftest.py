"""Fixtures for the reliability tests: the tiny XTTS, data and code cache of tests/train, reused.

The fixtures are imported from ``tests/fixtures/training.py`` (extended vocabulary, 12+4
synthetic clips, their DVAE codes, the in-process ``trainer`` and the subprocess ``script_args``);
helpers are in ``relhelpers.py``.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import pytest

from tests.fixtures.faults import patched_recipe
from tests.fixtures.parallel import built_once
from tests.reliability.relhelpers import small_config
from xtts_ft.checkpoint_store import CheckpointStore


@pytest.fixture(autouse=True)
def one_torch_thread():
    """In-process training on one thread (much faster on a busy small machine); the old setting is put back."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def trained_run(request, tiny_base, vocab, tokenizer, dataset, codes_cache, tmp_path_factory) -> Path:  # noqa: F811
    """A finished 4-step run with checkpoints at steps 2 and 4; tests copy it (``copy_run``) before damaging it.

    Trained once per test run (under xdist by one worker, tests/fixtures/parallel.py ``built_once``)."""
    import torch

    from xtts_ft.pipeline import run_training
    from xtts_ft.train import TrainInputs

    def build(folder: Path) -> None:
        built_model = request.getfixturevalue("built_model")
        run = folder / "run"
        shutil.copytree(codes_cache, run / "cache" / "dvae_codes")
        cfg = small_config(run, training={"max_steps": 4}, checkpoint={"every_steps": 2, "keep_last": 3})
        before = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            inputs = TrainInputs(base=tiny_base, vocab_path=vocab[0], base_vocab_size=vocab[1], train_csv=dataset[0],
                                 eval_csv=dataset[1], run_dir=run)
            with patched_recipe(lambda *_: copy.deepcopy(built_model)):
                result = run_training(cfg, inputs, tokenizer=tokenizer)
        finally:
            torch.set_num_threads(before)
        assert result.step == 4 and [c.step for c in CheckpointStore.of_run(run).list()] == [2, 4]

    return built_once(tmp_path_factory, "trained", build) / "run"  # never changed: tests copy it before damaging it
