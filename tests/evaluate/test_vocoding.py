"""The evaluation's faster vocoding computes the same audio, and picks its threads from the idle cores."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from xtts_ft.evaluate.vocoding import choose_threads, fast_vocoding, idle_cores, threads_for_idle_cores, vocode


def _stat(*cpus: tuple[int, int]) -> str:
    """/proc/stat text with one line per CPU: (busy user jiffies, idle jiffies)."""
    lines = ["cpu  1 2 3 4 5 6 7 8 0 0"]
    lines += [f"cpu{i} {busy} 0 0 {idle} 0 0 0 0 0 0" for i, (busy, idle) in enumerate(cpus)]
    return "\n".join(lines + ["intr 1 2 3", "ctxt 99"]) + "\n"


def test_idle_cores_are_read_from_the_change_in_proc_stat():
    # over the window: cpu0 busy all the time, cpu1 idle all the time, cpu2 half busy but not ours
    snapshots = iter([_stat((100, 100), (100, 100), (0, 0)), _stat((200, 100), (100, 200), (50, 50))])
    idle = idle_cores(0.0, read_stat=lambda: next(snapshots), cpus={0, 1})
    assert idle == pytest.approx(1.0)
    unchanged = _stat((5, 5), (5, 5))
    assert idle_cores(0.0, read_stat=lambda: unchanged, cpus={0, 1}) is None  # no time passed: cannot tell

    def unreadable() -> str:
        raise OSError("no /proc here")

    assert idle_cores(0.0, read_stat=unreadable, cpus={0}) is None


@pytest.mark.parametrize(("current", "idle", "expected"), [
    (2, None, 2),  # cannot tell: the trainer's choice stands
    (2, 0.0, 1),  # every core busy: one thread, never none
    (2, 0.4, 1),
    (2, 1.2, 1),  # one core free: a second thread would share a busy core and hold the first back
    (2, 1.6, 2),
    (2, 7.0, 2),  # never more than the trainer's threads
    (4, 2.9, 3),
])
def test_thread_choice(current, idle, expected):
    assert choose_threads(current, idle) == expected


def test_threads_are_lowered_inside_and_put_back():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with threads_for_idle_cores(torch.device("cpu"), measure=lambda: 0.0) as threads:
            assert threads == 1 == torch.get_num_threads()
        assert torch.get_num_threads() == 2
        asked = []
        with threads_for_idle_cores(torch.device("cuda"), measure=lambda: asked.append(1) or 0.0) as threads:
            assert threads == 2 == torch.get_num_threads()  # not the CPU: untouched, nothing measured
        assert not asked
    finally:
        torch.set_num_threads(before)


def test_fast_vocoding_gives_the_same_audio_as_the_plain_call(trained):
    """Weight norm computed once: bit-identical; on fewer threads: float rounding only."""
    xtts = trained.xtts
    hifigan = xtts.hifigan_decoder
    was_training = hifigan.training
    hifigan.train(False)
    generator = torch.Generator().manual_seed(0)
    latents = list(torch.randn(12, int(xtts.args.decoder_input_dim), generator=generator))
    g = torch.randn(1, 512, 1, generator=generator)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with torch.no_grad():
            plain = hifigan(torch.stack(latents)[None], g=g).reshape(-1).numpy()
        with fast_vocoding(torch.device("cpu"), measure=lambda: None) as threads:  # same threads
            assert threads == 2
            cached = [vocode(hifigan, latents, g) for _ in range(2)]  # the second call reads the cached weights
        with fast_vocoding(torch.device("cpu"), measure=lambda: 0.0) as threads:  # busy machine: one thread
            assert threads == 1
            single = vocode(hifigan, latents, g)
    finally:
        torch.set_num_threads(before)
        hifigan.train(was_training)
    assert plain.size > 0 and np.abs(plain).max() > 0
    assert np.array_equal(cached[0], plain) and np.array_equal(cached[1], plain)
    assert np.abs(single - plain).max() <= 1e-5
