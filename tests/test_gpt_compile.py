"""training.compile's blocks (xtts_ft/gpt_compile.py): bounded shapes, compiled = eager, and the one-line fallback.

torch.compile runs with inductor on this CPU (it needs a C compiler: ``cc`` is Debian's gcc 12 here); a test that
compiles is skipped with the reason where none is installed.
"""

from __future__ import annotations

import logging
import shutil

import pytest
import torch

from tests.test_gpt_forward import assert_same, losses_and_grads, mixed_batch, small_gpt
from xtts_ft.gpt_compile import MAX_SHAPES, CompiledBlocks, bucket_width, compile_enabled, longest_row
from xtts_ft.gpt_forward import fast_gpt_losses

LOGGER = "xtts_ft.gpt_compile"
needs_cc = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                              reason="torch.compile's inductor needs a C compiler (cc) on the CPU")


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """torch.compile caches compiled code per function for the process: each test starts (and leaves) it empty, so a
    graph compiled by one test's backend is not reused by another's."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def failing_backend(gm, example_inputs):
    raise RuntimeError("injected compiler failure\nsecond line of its story")


def fast(runner):
    return lambda gpt, **batch: fast_gpt_losses(gpt, **batch, runner=runner)


def test_lengths_round_up_to_a_handful_of_buckets():
    tiny = small_gpt()
    assert longest_row(tiny) == 32 + 42 + 63  # perceiver latents + coqui's max text (+2) and mel (+3) positions
    for longest in (longest_row(tiny), 32 + 404 + 608):  # the tiny GPT, XTTS-v2's full-size one
        width = bucket_width(longest)
        assert width % 8 == 0 and -(-longest // width) <= 6
        runner = CompiledBlocks(longest, compile_fn=lambda fn, **kw: fn)
        lengths = {runner.padded_length(n) for n in range(40, longest + 1)}
        assert len(lengths) <= 6 and all(n % width == 0 for n in lengths)
        assert all(runner.padded_length(n) >= n for n in range(1, longest + 1))
    with torch.no_grad():  # evaluation runs eager, unpadded
        assert runner.padded_length(41) == 41
    runner.expect_lengths(runner.width + 1, 3 * runner.width)  # the run's data reaches buckets 2 and 3 only
    assert runner.buckets == 2
    runner.shapes[(4, 2 * runner.width, torch.float32, True)] = 10.0  # one compiled, of 10 s
    assert runner.pending_seconds() == 10.0


@pytest.mark.parametrize(("setting", "device", "on"), [
    ("auto", "cuda", True), ("auto", "cpu", False), ("on", "cpu", True), (True, "cpu", True), ("off", "cuda", False),
    (False, "cuda", False)])
def test_compile_setting(setting, device, on):
    assert compile_enabled(setting, torch.device(device)) is on


def test_a_compile_failure_falls_back_to_eager_with_one_line(caplog):
    gpt, batch = small_gpt(), mixed_batch()
    reference = losses_and_grads(fast_gpt_losses, gpt, batch)
    runner = CompiledBlocks(longest_row(gpt), backend=failing_backend)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        first = losses_and_grads(fast(runner), gpt, batch)
        second = losses_and_grads(fast(runner), gpt, batch)
    lines = [r for r in caplog.records if r.name == LOGGER]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING
    message = lines[0].getMessage()
    assert "torch.compile failed" in message and "injected compiler failure" in message and "\n" not in message
    assert runner.failed and runner.shapes == {} and runner.pending_seconds() == 0.0
    assert_same(reference, first, rel=1e-6)
    assert_same(reference, second, rel=1e-6)


def test_hooked_blocks_no_gradients_and_the_probe_run_eager(caplog):
    """The stability layer's diagnosis hooks every module; evaluation has no gradients; the probe pauses: none compiles
    (a failing backend would say so)."""
    gpt, batch = small_gpt(), mixed_batch()
    runner = CompiledBlocks(longest_row(gpt), backend=failing_backend)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        handle = gpt.gpt.h[0].attn.c_proj.register_forward_hook(lambda *a: None)
        fast_gpt_losses(gpt, **batch, runner=runner)
        handle.remove()
        with torch.no_grad():
            fast_gpt_losses(gpt, **batch, runner=runner)
        with runner.paused():
            fast_gpt_losses(gpt, **batch, runner=runner)
        assert not caplog.records and not runner.failed
        fast_gpt_losses(gpt, **batch, runner=runner)  # and now it does try
    assert runner.failed


def test_shapes_past_the_limit_run_eager(caplog):
    counted = []

    def count_backend(gm, example_inputs):
        counted.append(1)
        return gm.forward

    gpt = small_gpt()
    runner = CompiledBlocks(longest_row(gpt), backend=count_backend)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        for batch_size in range(1, MAX_SHAPES + 3):
            x = torch.randn(batch_size, 24, 64, requires_grad=True)
            runner.run(gpt.gpt.h, x, checkpointing=False).sum().backward()
    assert len(runner.shapes) == MAX_SHAPES
    assert sum("runs eager" in r.getMessage() for r in caplog.records) == 2


@needs_cc
@pytest.mark.slow  # inductor compiles C++ kernels: ~20-40 s on 2 cores
def test_compiled_blocks_equal_eager_and_compile_once_per_bucket(caplog):
    gpt, batch = small_gpt(), mixed_batch()
    reference = losses_and_grads(fast_gpt_losses, gpt, batch)
    runner = CompiledBlocks(longest_row(gpt))
    with caplog.at_level(logging.INFO, logger=LOGGER):
        compiled = losses_and_grads(fast(runner), gpt, batch)
        shorter = dict(batch, wav_lengths=batch["wav_lengths"] - 1024)  # one code shorter: the same bucket
        losses_and_grads(fast(runner), gpt, shorter)
        again = losses_and_grads(fast(runner), gpt, batch)
    assert not runner.failed and len(runner.shapes) == 1
    assert_same(reference, compiled, rel=1e-4)
    assert_same(compiled, again, rel=1e-6)
    assert runner.compile_seconds > 0 and runner.pending_seconds() > 0  # more buckets may come
    lines = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(lines) == 1 and "GPT blocks compiled for batch 4" in lines[0]
