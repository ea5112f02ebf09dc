"""The evaluation's vocoding: several samples at once on one intra-op thread each, the same audio every time."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from xtts_ft.inference.vocoding import vocode, vocode_all
from xtts_ft.stop_signals import StopRequested


@pytest.fixture
def hifigan(trained):
    module = trained.xtts.hifigan_decoder
    was_training = module.training
    module.train(False)
    yield module
    module.train(was_training)


def _jobs(trained, lengths: tuple[int, ...]) -> list[tuple[list[torch.Tensor], torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    dim = int(trained.xtts.args.decoder_input_dim)
    return [(list(torch.randn(n, dim, generator=generator)), torch.randn(1, 512, 1, generator=generator))
            for n in lengths]


def _plain(hifigan, job) -> np.ndarray:
    """The vocoding before: one call on the module, its weight norm recomputed, at torch's thread count."""
    latents, g = job
    with torch.no_grad():
        return hifigan(torch.stack(latents)[None], g=g).reshape(-1).numpy()


def test_the_samples_sound_as_before_and_the_same_every_time(trained, hifigan):
    jobs = _jobs(trained, (9, 14, 6))
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        plain = [_plain(hifigan, job) for job in jobs]  # the trainer's 2 threads, one sample at a time
        together = vocode_all(hifigan, jobs)  # two samples at once, one thread each
        assert torch.get_num_threads() == 2  # the trainer's count is back
        alone = vocode_all(hifigan, jobs, workers=1)  # one at a time, still one intra-op thread
        torch.set_num_threads(1)
        single = [vocode(hifigan, *job) for job in jobs]  # the reference: each sample on one thread
    finally:
        torch.set_num_threads(before)
    assert [a.size for a, _ in together] == [p.size for p in plain] and all(s > 0 for _, s in together)
    for (audio, _), (again, _), reference, old in zip(together, alone, single, plain):
        assert np.array_equal(audio, reference) and np.array_equal(again, reference)  # load and workers change nothing
        assert np.abs(audio - old).max() <= 1e-5  # against the trainer-thread vocoding: float rounding only
        assert np.abs(old).max() > 0


def test_a_stop_inside_a_sample_ends_the_vocoding(trained, hifigan):
    """The training run's stop request is checked inside every module: it comes out of a worker thread as itself."""
    jobs = _jobs(trained, (6, 6, 6, 6))
    calls: list[int] = []

    def stop_on_the_tenth(*_args) -> None:
        calls.append(1)
        if len(calls) == 10:
            raise StopRequested("sample synthesis")

    handles = [m.register_forward_pre_hook(stop_on_the_tenth) for m in hifigan.modules()]
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with pytest.raises(StopRequested):
            vocode_all(hifigan, jobs)
        assert torch.get_num_threads() == 2
    finally:
        for handle in handles:
            handle.remove()
        torch.set_num_threads(before)
