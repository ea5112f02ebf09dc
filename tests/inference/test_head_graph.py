"""The decode step's head (final norm to each row's distribution) of fixed shapes that a CUDA graph replays, run on
the CPU with a recorder that records nothing.

What a GPU adds (the recording and the replay) is checked by the head itself at every recording against the eager
head; here: through joins, leaves and a cancel the replayed head gives the eager decoder's codes and latents, each
(rows, setting) shape is recorded once, a batch of mixed settings runs the eager head, a recording that fails or
differs turns the head graphs off without changing a code, and logits that are not finite are still refused.
"""

from __future__ import annotations

import logging

import pytest
import torch

from tests.inference.golden import TEMPERATURE, golden_model
from tests.inference.recorders import assert_turned_off_once, graph_like, refused
from tests.inference.test_batch_decode import COQUI, _request, _run_schedule
from xtts_ft.inference.batch_decode import BatchDecoder, DecoderParts, Sampling
from xtts_ft.inference.decode_graph import FixedShapeStep, call_directly
from xtts_ft.inference.head_graph import FixedShapeHead, head


@pytest.fixture(scope="module")
def golden(tiny_base, am_vocab):
    return golden_model(tiny_base, am_vocab)


GREEDY = Sampling(temperature=TEMPERATURE, do_sample=False, repetition_penalty=1.0)
HOT = Sampling(temperature=1.3, top_k=20, top_p=0.95, repetition_penalty=2.0)


class _CountingHead(FixedShapeHead):
    """Notes the rows of every call and the setting it was made with."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.calls: list[tuple[int, Sampling]] = []

    def run(self, gpt, hidden, seen, sampling):
        self.calls.append((hidden.shape[0], sampling))
        return super().run(gpt, hidden, seen, sampling)


def _decode(golden, sampling_of, fixed_head=None, graphs: bool = True, long_codes: int = 60):
    """The schedule of joins, leaves and a cancel through a decoder with (or without) fixed shapes."""
    if graphs:
        decoder = BatchDecoder(golden[0].gpt, DecoderParts(step=FixedShapeStep(record=call_directly), max_rows=8,
                                                            head=fixed_head))
    else:
        decoder = BatchDecoder(golden[0].gpt)
    return _run_schedule(decoder, golden, sampling_of, long_codes)


@pytest.mark.parametrize("sampling", [COQUI, GREEDY], ids=["coqui-sampling", "greedy"])
def test_the_replayed_head_gives_the_eager_decoders_codes_and_latents(golden, sampling):
    eager = _decode(golden, lambda i: sampling, graphs=False)
    fixed = _CountingHead(record=graph_like)
    rows = _decode(golden, lambda i: sampling, fixed)
    assert fixed.disabled is None
    assert [r.codes for r in rows] == [r.codes for r in eager]
    for a, b in zip(rows, eager):
        torch.testing.assert_close(torch.stack(a.latents), torch.stack(b.latents), rtol=1e-5, atol=1e-5)
    # every choice went through it (joins and steps), each power-of-two row count recorded once, replayed after
    shapes = {1 << max(n - 1, 0).bit_length() for n, _ in fixed.calls}
    assert len(shapes) >= 3, "rows joined and left: several row counts"
    assert fixed.recordings == len(shapes) and fixed.replays == len(fixed.calls) - len(shapes)
    assert sum(len(r.codes) for r in rows) >= len(fixed.calls) > 60


def test_the_head_keeps_no_latent_the_next_replay_writes_over(golden):
    """The latents a request keeps are its own (the graph's output buffer is written again at every replay)."""
    fixed = FixedShapeHead(record=graph_like)
    gpt = golden[0].gpt
    dim, vocab = gpt.gpt.config.n_embd, gpt.mel_head.out_features
    seen = torch.zeros(2, vocab, dtype=torch.bool)
    with torch.inference_mode():
        first = [fixed.run(gpt, torch.randn(2, dim, generator=torch.Generator().manual_seed(s)), seen, COQUI)
                 for s in range(3)]
        again = head(gpt, torch.randn(2, dim, generator=torch.Generator().manual_seed(1)), seen, COQUI)
    assert fixed.recordings == 1 and fixed.replays == 2
    # the first replay's latents, after the second replay: still its own
    torch.testing.assert_close(first[1][0], again[0], rtol=0, atol=0)
    assert not torch.equal(first[1][0], first[2][0])


def test_a_batch_of_mixed_settings_runs_the_eager_head(golden):
    settings = [COQUI, HOT, GREEDY]
    eager = _decode(golden, lambda i: settings[i % 3], graphs=False, long_codes=30)
    fixed = _CountingHead(record=call_directly)
    rows = _decode(golden, lambda i: settings[i % 3], fixed, long_codes=30)
    assert [r.codes for r in rows] == [r.codes for r in eager]
    # a join (one request) and a step whose rows share a setting use it; a step of rows of several settings does not
    mixed_steps = len(fixed.calls) < sum(len(r.codes) for r in rows)
    assert mixed_steps, "the steps with rows of several settings did not go through the fixed head"
    assert fixed.recordings == len({(1 << max(n - 1, 0).bit_length(), s) for n, s in fixed.calls})


def test_a_head_recording_that_fails_or_differs_turns_head_graphs_off_and_changes_no_code(golden, caplog):
    def wrong(step):
        def replay():
            latents, distribution, finite = step()
            return latents, distribution * 1.5, finite
        return replay

    eager = _decode(golden, lambda i: COQUI, graphs=False, long_codes=30)
    for recorder, why in ((refused, "recording the decode head failed: operation not permitted"),
                          (wrong, "the recorded decode head differs from the eager one")):
        fixed = FixedShapeHead(record=recorder)
        with caplog.at_level(logging.WARNING, logger="xtts_ft.inference.head_graph"):
            rows = _decode(golden, lambda i: COQUI, fixed, long_codes=30)
        assert_turned_off_once(fixed, why, rows, eager, [r for r in caplog.records if "eager head" in r.message],
                               "CUDA graphs off")
        caplog.clear()


def test_logits_that_are_not_finite_are_refused_through_the_replayed_head(golden):
    requests = [_request(golden, "hi", 0), _request(golden, "peter piper", 1)]
    decoder = BatchDecoder(golden[0].gpt, DecoderParts(step=FixedShapeStep(record=call_directly), max_rows=4,
                                                        head=FixedShapeHead(record=call_directly)))
    with torch.inference_mode():
        decoder.join(*requests)
        decoder.step()  # the 2-row shape recorded
        hidden = torch.zeros(2, golden[0].gpt.gpt.config.n_embd)
        hidden[1, 0] = float("nan")
        replays = decoder.parts.head.replays
        with pytest.raises(RuntimeError, match="logits are not finite .* for 1 of 2 requests"):
            decoder._accept(decoder.rows, decoder._seen, hidden)
    assert decoder.parts.head.replays == replays + 1


def test_by_default_every_head_shape_is_recorded_into_one_shared_pool(golden, monkeypatch):
    """serve's head graphs (no recorder given) share one memory pool, made at the first recording: a head's outputs
    are read before the next step, so the shapes need not each keep their own working memory."""
    from xtts_ft.inference import head_graph

    made = []

    def one_pool():
        made.append(1)
        return graph_like

    monkeypatch.setattr(head_graph, "shared_pool_graphs", one_pool)
    fixed = FixedShapeHead()
    gpt = golden[0].gpt
    dim, vocab = gpt.gpt.config.n_embd, gpt.mel_head.out_features
    with torch.inference_mode():
        for rows in (1, 2, 3, 4):  # shapes of 1, 2, 4 and 4 rows
            fixed.run(gpt, torch.randn(rows, dim), torch.zeros(rows, vocab, dtype=torch.bool), COQUI)
    assert made == [1] and fixed.recordings == 3 and fixed.replays == 1
