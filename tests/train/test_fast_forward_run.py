"""The training runs on the fast forward and with training.compile: the losses of today's code (coqui's forward),
the compile time in the metrics and the ETA, and the one-line fallback when compiling fails.

Dropout is off in these runs (the model factory sets p = 0): it draws its random numbers over differently laid-out
tensors in each path, so with it on the paths agree only in distribution.
"""

from __future__ import annotations

import copy
import functools
import logging
import shutil

import pytest

from tests.test_gpt_compile import failing_backend, fresh_dynamo  # noqa: F401 - fresh_dynamo: autouse fixture
from tests.test_gpt_forward import no_dropout
from tests.train.trainhelpers import small_config, train_lines
from xtts_ft.gpt_compile import CompiledBlocks
from xtts_ft.train import session


@pytest.fixture
def plain_factory(built_model):
    """Fresh dropout-free copies of the tiny model; ``.built`` keeps the ones handed out."""
    def make(*_args):
        model = no_dropout(copy.deepcopy(built_model))
        make.built.append(model)
        return model

    make.built = []
    return make


def losses(run_dir) -> list[tuple[float, float, float]]:
    return [(r["loss"], r["loss_text_ce"], r["loss_mel_ce"]) for r in train_lines(run_dir)]


def assert_close(a, b, rel: float) -> None:
    assert len(a) == len(b) and a
    for step, (x, y) in enumerate(zip(a, b), start=1):
        assert x == pytest.approx(y, rel=rel), f"step {step}: {x} vs {y}"


def test_a_twenty_step_run_has_the_losses_of_coquis_forward(trainer, plain_factory, tmp_path, caplog):
    runs = {}
    with caplog.at_level(logging.INFO, logger="xtts_ft.train.session"):
        for path in ("coqui", "fast"):
            cfg = small_config(tmp_path / path, training={"max_steps": 20, "batch_size": 4, "gpt_forward": path})
            trainer(cfg, model_factory=plain_factory)
            runs[path] = losses(tmp_path / path)
    assert [m.forward_path for m in plain_factory.built] == ["coqui", "fast"]
    assert "training forward: fast, GPT blocks not compiled (training.compile: auto)" in caplog.text
    assert len(runs["fast"]) == 20
    assert_close(runs["fast"], runs["coqui"], rel=1e-4)
    assert runs["fast"][-1][0] < runs["fast"][0][0]  # and it trains


def test_a_compile_failure_falls_back_to_eager_in_a_run(trainer, plain_factory, tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(session, "CompiledBlocks", functools.partial(CompiledBlocks, backend=failing_backend))
    with caplog.at_level(logging.INFO):
        trainer(small_config(tmp_path / "failed", training={"max_steps": 3, "compile": "on"}),
                model_factory=plain_factory)
    trainer(small_config(tmp_path / "eager", training={"max_steps": 3}), model_factory=plain_factory)
    failures = [r for r in caplog.records if "torch.compile failed" in r.getMessage()]
    assert len(failures) == 1 and "injected compiler failure" in failures[0].getMessage()
    assert_close(losses(tmp_path / "failed"), losses(tmp_path / "eager"), rel=1e-6)


@pytest.mark.skipif(shutil.which("cc") is None, reason="torch.compile's inductor needs a C compiler (cc) on the CPU")
@pytest.mark.slow  # inductor compiles the tiny GPT's blocks (C++ kernels): ~30-60 s on 2 cores
def test_a_compiled_run_trains_like_the_eager_one_and_reports_its_compile_time(trainer, plain_factory, tmp_path,
                                                                               caplog):
    """Batch 12 = the whole training set: every step (and the pre-flight) has the same shape, one compile."""
    training = {"max_steps": 4, "batch_size": 12, "log_every": 1}
    with caplog.at_level(logging.INFO, logger="xtts_ft"):
        trainer(small_config(tmp_path / "compiled", training={**training, "compile": "on"}),
                model_factory=plain_factory)
    trainer(small_config(tmp_path / "eager", training={**training, "compile": "off"}), model_factory=plain_factory)
    runner = plain_factory.built[0].block_runner
    assert isinstance(runner, CompiledBlocks) and not runner.failed and len(runner.shapes) == 1
    assert plain_factory.built[1].block_runner is None
    assert_close(losses(tmp_path / "compiled"), losses(tmp_path / "eager"), rel=1e-3)
    assert "GPT blocks compiled for batch 12" in caplog.text and "torch.compile failed" not in caplog.text
    lines = train_lines(tmp_path / "compiled")
    compiled_in_steps = sum(r.get("compile_s", 0.0) for r in lines)
    # the pre-flight compiled the one shape before step 1: no step compiled again
    assert compiled_in_steps == 0.0 and runner.compile_seconds > 0
