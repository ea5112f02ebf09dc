"""Training really learns: the tiny model on the bundled demo data lowers the eval mel loss clearly.

Reads the session's demo run (tests/fixtures/demo_run.py: the demo's pipeline, prepare -> tokenizer ->
train, for 60 steps with an evaluation at the start and at the end).
"""

from __future__ import annotations

import json

import pytest

from tests.fixtures.demo_run import DEMO_STEPS

pytestmark = pytest.mark.slow  # reads the demo run (a full pipeline, once per session)


def test_demo_training_lowers_eval_mel_loss(demo_run):
    lines = [json.loads(x) for x in (demo_run.run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    evals = [m for m in lines if m.get("split") == "eval"]
    assert evals[0]["step"] == 0 and evals[-1]["step"] == DEMO_STEPS == 60
    first, last = evals[0]["eval_loss_mel_ce"], evals[-1]["eval_loss_mel_ce"]
    # A random 258-code model starts near ln(258) ~ 5.6; 60 steps on 63 clips bring it far below.
    assert last < 0.7 * first, (first, last)
