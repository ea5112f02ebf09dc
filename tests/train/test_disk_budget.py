"""The disk budget: what a run will write is estimated before training and refused in one line if it cannot fit."""

from __future__ import annotations

import dataclasses

import pytest

from tests.train.trainhelpers import small_config
from xtts_ft.config import with_changes
from xtts_ft.errors import DiskSpaceError
from xtts_ft.model import model_limits
from xtts_ft.train.data import Limits
from xtts_ft.train.disk_budget import check_disk_budget, estimate_run_disk


def _limits(model) -> Limits:
    return Limits(**model_limits(model.xtts))


def _gpt_bytes(gpt):
    weights = sum(t.numel() * t.element_size() for t in list(gpt.parameters()) + list(gpt.buffers()))
    trainable = sum(p.numel() * p.element_size() for p in gpt.parameters() if p.requires_grad)
    return weights, trainable


def test_estimate_counts_every_kept_checkpoint_with_its_optimizer_state(built_model, tmp_path):
    weights, trainable = _gpt_bytes(built_model.gpt)
    cfg = small_config(tmp_path / "run", checkpoint={"keep_last": 3, "keep_best": True})
    full = estimate_run_disk(cfg, built_model.gpt, _limits(built_model), run_dir=tmp_path / "run")
    assert full.full_checkpoint == weights + 2 * trainable and full.weights_checkpoint == weights
    assert full.checkpoints == 5 * full.full_checkpoint  # 3 kept + best + the one being written
    cfg = with_changes(cfg, checkpoint={"optimizer_state": "latest"})
    slim = estimate_run_disk(cfg, built_model.gpt, _limits(built_model), run_dir=tmp_path / "run")
    assert slim.checkpoints == 2 * full.full_checkpoint + 4 * weights < full.checkpoints
    assert full.total == full.checkpoints + full.samples + full.export + full.caches


def test_a_budget_smaller_than_the_estimate_is_refused_in_one_line(built_model, tmp_path):
    cfg = small_config(tmp_path / "run", checkpoint={"keep_last": 3, "keep_best": True})
    estimate = estimate_run_disk(cfg, built_model.gpt, _limits(built_model), run_dir=tmp_path / "run")
    check_disk_budget(cfg, estimate, tmp_path, free_bytes=estimate.total)  # exactly enough: fine
    with pytest.raises(DiskSpaceError) as info:
        check_disk_budget(cfg, estimate, tmp_path, free_bytes=estimate.total - 1)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{tmp_path}: the run needs about ")
    for setting in ("checkpoint.keep_last: 1", "checkpoint.keep_best: false", "checkpoint.optimizer_state: latest",
                    "or free space on that disk"):
        assert setting in message
    assert_numbers_add_up(message)


def assert_numbers_add_up(message: str) -> None:
    """The shown parts (a x b for checkpoints, then each part) add up to the shown total, twice over."""
    import re

    about = float(re.search(r"needs about ([\d.]+) ([MG]B)", message).group(1))
    sums = re.search(r"checkpoints ([\d.]+) [MG]B \((.*?)\) \+ export ([\d.]+) [MG]B \+ samples ([\d.]+) [MG]B "
                     r"\+ caches ([\d.]+) [MG]B = ([\d.]+) [MG]B", message)
    assert sums, message
    checkpoints, kinds, export, samples, caches, total = sums.groups()
    products = sum(int(n) * float(size) for n, size in re.findall(r"(\d+) x ([\d.]+)", kinds))
    already = re.search(r"- ([\d.]+) [MG]B already written", kinds)
    assert abs(products - (float(already.group(1)) if already else 0) - float(checkpoints)) < 0.011, message
    assert abs(float(checkpoints) + float(export) + float(samples) + float(caches) - float(total)) < 0.011, message
    assert float(total) == about, message


def test_a_machine_with_a_run_folder_of_its_own_needs_room_for_its_caches_only(built_model, tmp_path):
    """Under torchrun with node-local disks rank 0 alone writes checkpoints, samples and exports."""
    cfg = small_config(tmp_path / "run", checkpoint={"keep_last": 3, "keep_best": True})
    estimate = estimate_run_disk(cfg, built_model.gpt, _limits(built_model), run_dir=tmp_path / "run")
    own = estimate.caches_only()
    assert own.total == estimate.caches < estimate.total
    check_disk_budget(cfg, own, tmp_path, free_bytes=estimate.caches)  # what rank 0 would be refused with
    with pytest.raises(DiskSpaceError):
        check_disk_budget(cfg, estimate, tmp_path, free_bytes=estimate.caches)


def test_a_given_budget_is_what_the_refusal_offers_to_raise(built_model, tmp_path):
    cfg = small_config(tmp_path / "run", checkpoint={"keep_last": 2, "disk_budget_gb": 0.01})
    estimate = estimate_run_disk(cfg, built_model.gpt, _limits(built_model), run_dir=tmp_path / "run")
    with pytest.raises(DiskSpaceError) as info:
        check_disk_budget(cfg, estimate, tmp_path)
    message = str(info.value)
    assert "the budget checkpoint.disk_budget_gb is 0.01 GB" in message and "larger disk" not in message
    assert "checkpoint.keep_last: 1" in message and "or raise checkpoint.disk_budget_gb to at least" in message
    assert_numbers_add_up(message)


def test_training_stops_before_the_first_step_when_the_budget_is_too_small(trainer, tmp_path):
    run = tmp_path / "run"
    cfg = small_config(run, checkpoint={"disk_budget_gb": 0.001})
    with pytest.raises(DiskSpaceError, match=r"the budget checkpoint.disk_budget_gb is 0.001 GB.*lower it with "
                                             r"checkpoint.keep_last"):
        trainer(cfg)
    assert not (run / "checkpoints").exists() and not (run / "metrics.jsonl").exists()


def test_the_samples_are_sized_by_the_models_own_limits(built_model, tmp_path):
    """The longest sample is what this model can say (its codes x stride / rate), not XTTS-v2's 605 codes."""
    cfg = small_config(tmp_path / "run")
    limits = _limits(built_model)
    args = built_model.xtts.args
    assert limits.longest_audio_s == args.gpt_max_audio_tokens * args.gpt_code_stride_len / limits.sample_rate
    one = estimate_run_disk(cfg, built_model.gpt, limits, run_dir=tmp_path / "run")
    longer = dataclasses.replace(limits, max_audio_tokens=2 * limits.max_audio_tokens)
    two = estimate_run_disk(cfg, built_model.gpt, longer, run_dir=tmp_path / "run")
    assert one.samples > 0 and abs(two.samples - 2 * one.samples) <= 1
