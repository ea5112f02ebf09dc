"""batch_size: auto (4 on CPU) and gradient checkpointing (same losses, activations recomputed)."""

from __future__ import annotations

import pytest
from trainhelpers import small_config, train_lines


def test_gradient_checkpointing_and_auto_batch_size(trainer, model_factory, tmp_path, caplog):
    caplog.set_level("INFO")
    losses, models = {}, []
    for checkpointing, batch_size in ((True, "auto"), (False, 4)):
        run = tmp_path / f"gc_{checkpointing}"
        trainer(small_config(run, training={"max_steps": 2, "batch_size": batch_size,
                                            "gradient_checkpointing": checkpointing}),
                model_factory=lambda *a: models.append(model_factory(*a)) or models[-1])
        losses[checkpointing] = [(r["loss"], r["grad_norm"]) for r in train_lines(run)]
    assert "batch_size auto: 4 on cpu" in caplog.text and "gradient checkpointing on" in caplog.text
    assert "effective batch 4" in caplog.text
    assert models[0].gpt.gpt.h[0].gradient_checkpointing and not models[1].gpt.gpt.h[0].gradient_checkpointing
    assert not hasattr(models[0].gpt.gpt, "wte")  # the temporary alias is gone
    for (a_loss, a_norm), (b_loss, b_norm) in zip(losses[True], losses[False], strict=True):
        assert a_loss == pytest.approx(b_loss, rel=1e-5) and a_norm == pytest.approx(b_norm, rel=1e-4)
