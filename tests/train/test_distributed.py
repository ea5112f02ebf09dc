"""Two gloo processes under torchrun: gradients are all-reduced, so both ranks end with identical weights.

The ranks see disjoint data shards (test_data) and different dropout seeds, so without the
all-reduce their weights would differ after the first step.
"""

from __future__ import annotations

import json
import subprocess

import pytest
import torch

from tests.fixtures.demo_run import DEMO_SENTENCE
from tests.fixtures.scripts import HEADLESS_RANKS, REPO_ROOT, SLOW_CODES_RANKS, script_env, torchrun_command
from tests.train.trainhelpers import read_events, train_lines
from xtts_ft.train.stability import gpt_state_dict

pytestmark = pytest.mark.slow  # two torchrun ranks per test


def test_torchrun_headless_demo_from_an_empty_run_dir(tmp_path):
    """docs/gpus.md's multi-GPU command on 2 gloo ranks from nothing: the stages that write files ran once
    (on rank 0; rank 1 read their outputs), training kept the ranks identical, and the run finished."""
    run, out = tmp_path / "run", tmp_path / "ranks"
    out.mkdir()
    cmd = torchrun_command(HEADLESS_RANKS, out, "--config", "configs/demo.yaml", "--max-steps", "2",
                           "--set", f"run.output_dir={run}", "--set", f"base_model.source={tmp_path / 'tiny_base'}",
                           "--set", "evaluation.every_steps=0", "--set", "evaluation.mcd_clips=0",
                           "--set", "evaluation.quality=false",
                           # the end-of-run evaluation as the demo fixture makes it (tests/fixtures/demo_run.py):
                           # one short sample instead of eight of 100 tokens (a random model never stops)
                           "--set", f"evaluation.sentences=['{DEMO_SENTENCE}']", "--set", "evaluation.max_new_tokens=20",
                           "--set", "training.warmup_steps=0")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO_ROOT,
                          env=script_env(OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    counts = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    assert [c["exit"] for c in counts] == [0, 0]
    for stage in ("write_tiny_model", "prepare_dataset", "build_extended_vocab", "write_report"):
        assert counts[0].get(stage) == 1 and stage not in counts[1], (stage, counts)
    assert counts[0]["dvae_codes_computed"] > 0 and counts[1].get("dvae_codes_computed", 0) == 0
    assert not list(run.rglob("*.part")) and not list(run.rglob("*.tmp"))
    assert (run / "checkpoints" / "step_000002" / "meta.json").is_file() and (run / "report.html").is_file()
    ranks = [torch.load(out / f"rank{r}.pt", weights_only=True) for r in range(2)]
    assert ranks[0].keys() == ranks[1].keys()
    for key in ranks[0]:
        assert torch.equal(ranks[0][key], ranks[1][key]), key
    assert (run / "train.log").read_text().count("xtts-ft run:") == 1  # one writer of the log and the header


def test_gloo_ranks_wait_for_a_slow_code_cache_then_train_identically(script_args, built_model, tmp_path):
    """Two gloo ranks of the small run (one torchrun, where two tests each started one):

    - rank 0 builds the DVAE code cache for longer than the default group's timeout (60 min in a real run,
      5 s here); rank 1 waits on MainFirst's long-timeout gloo group instead, and the run finishes;
    - gradients are all-reduced: both ranks end with identical weights, rank 0 alone writes metrics and saves.
    """
    run, out = tmp_path / "run", tmp_path / "out"
    out.mkdir()
    path = script_args(run, sections={"training": {"max_steps": 3}}, weights_out=out)
    args = json.loads(path.read_text())
    args.update(collective_timeout_s=5, slow_codes_s=8)
    path.write_text(json.dumps(args))
    cmd = torchrun_command(SLOW_CODES_RANKS, path)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=script_env(OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    waited = json.loads((out / "codes_rank1.json").read_text())["seconds"]
    assert waited >= 8 > 5, waited  # rank 1 sat through rank 0's build, past the default group's timeout

    assert "process group: gloo, rank 0 of 2" in proc.stderr and "process group: gloo, rank 1 of 2" in proc.stderr
    assert "effective batch 4" in proc.stderr  # 2 clips x 1 accumulation x 2 processes
    ranks = [torch.load(out / f"rank{r}.pt", weights_only=True) for r in range(2)]
    start = gpt_state_dict(built_model.gpt)
    assert ranks[0].keys() == ranks[1].keys() == start.keys()
    for key in ranks[0]:
        assert torch.equal(ranks[0][key], ranks[1][key]), key
    assert any(not torch.equal(ranks[0][k], start[k]) for k in start)  # they did train
    assert [r["step"] for r in train_lines(run)] == [1, 2, 3]  # rank 0 alone writes metrics
    assert [r["step"] for r in read_events(run) if r.get("event") == "checkpoint"] == [3]  # one writer, one save
    assert (run / "checkpoints" / "step_000003" / "meta.json").is_file()
