"""torch threads and loader workers are decided together, so a busy small CPU does not stall; a key overrides."""

from __future__ import annotations

import logging

import torch

from xtts_ft.train.cpu_threads import apply_cpu_plan, plan_cpu


def test_a_busy_two_core_machine_gets_one_torch_thread_and_one_worker():
    plan = plan_cpu("auto", 2, "cpu", cores=2, load=5.0, ceiling=2)
    assert (plan.threads, plan.workers) == (1, 1)
    assert "capped at 1" in plan.describe() and "load 5.0" in plan.describe()


def test_an_idle_machine_uses_the_cores_the_workers_leave():
    assert plan_cpu("auto", 2, "cpu", cores=8, load=1.0, ceiling=8).threads == 6  # this process is the 1.0
    assert plan_cpu("auto", 0, "cpu", cores=2, load=1.0, ceiling=2).threads == 2
    assert plan_cpu("auto", 2, "cpu", cores=8, load=5.0, ceiling=8).threads == 4  # 4 others busy
    assert plan_cpu("auto", 4, "cuda", cores=4, load=0.0, ceiling=4).workers == 4  # a GPU run keeps its workers


def test_auto_never_raises_a_lower_thread_count_and_a_key_or_omp_overrides():
    assert plan_cpu("auto", 0, "cpu", cores=16, load=0.0, ceiling=1).threads == 1
    assert plan_cpu("auto", 0, "cpu", cores=16, load=0.0, ceiling=16, env_threads="3").threads == 3
    plan = plan_cpu(5, 1, "cpu", cores=2, load=9.0, ceiling=2)
    assert plan.threads == 5 and plan.reason.startswith("training.cpu_threads")


def test_the_choice_is_applied_and_logged(caplog):
    before = torch.get_num_threads()
    caplog.set_level(logging.INFO, logger="xtts_ft.train.cpu_threads")
    try:
        plan = apply_cpu_plan(1, 0, "cpu")
        assert torch.get_num_threads() == 1
        assert "CPU: torch threads 1, data-loader workers 0 (training.cpu_threads)" in caplog.text
        assert plan.workers == 0
    finally:
        torch.set_num_threads(before)
