"""The prefill of fixed shapes that CUDA graphs replay, run on the CPU with a recorder that records nothing.

What a GPU adds (the recording and the replay) is checked by the prefill itself at each recording against the
eager prefill; here: the padded causal forward computes Hugging Face's prefill for every real position, each
(rows, positions) bucket is recorded once and replayed after, the codes are the eager decoder's, and a recording
that fails or differs turns the prefill graphs off without changing a code.
"""

from __future__ import annotations

import logging

import pytest
import torch

from tests.inference.golden import golden_model
from tests.inference.recorders import assert_turned_off_once, refused
from tests.inference.test_batch_decode import _request
from tests.inference.test_decode_graph import _sampling_of
from xtts_ft.inference.batch_decode import BatchDecoder, DecoderParts, prefill_forward, prefill_rows
from xtts_ft.inference.decode_graph import FixedShapeStep, call_directly
from xtts_ft.inference.prefill_graph import FixedShapePrefill, causal_blocks

TEXTS = ["hi", "a much longer sentence than the others here to pad the cache", "peter piper", "zebra",
         "the quick brown fox jumps", "xy", "one two three four five six seven eight nine ten eleven"]


@pytest.fixture(scope="module")
def golden(tiny_base, am_vocab):
    return golden_model(tiny_base, am_vocab)


def _decode(golden, prefill: FixedShapePrefill | None, groups=((0,), (1, 2, 3), (4,), (5, 6))):
    """The texts joined in ``groups`` (a group prefilled together), one step between joins, decoded to the end."""
    decoder = BatchDecoder(golden[0].gpt, DecoderParts(step=FixedShapeStep(record=call_directly) if prefill else None,
                                                        max_rows=8, prefill=prefill))
    rows = [_request(golden, t, i, sampling=_sampling_of(i), max_codes=25 + 5 * i) for i, t in enumerate(TEXTS)]
    with torch.inference_mode():
        for group in groups:
            decoder.join(*[rows[i] for i in group])
            decoder.step()
        while decoder.rows:
            decoder.step()
    return rows


def test_the_padded_causal_forward_is_hugging_faces_prefill_at_every_real_position(golden):
    gpt = golden[0].gpt
    rows = prefill_rows(gpt, [_request(golden, t, 0).prefix for t in TEXTS[:3]])
    with torch.inference_mode():
        hidden, keys, values, lengths = prefill_forward(gpt.gpt, rows)
        longest = max(lengths) + 13  # more padding on the right than any row has
        padded = torch.cat([torch.nn.functional.pad(r, (0, 0, 0, longest - r.shape[1])) for r in rows])
        normed, got_keys, got_values = causal_blocks(gpt.gpt, padded)
    assert len(set(lengths)) == 3
    for i, n in enumerate(lengths):
        torch.testing.assert_close(normed[i, n - 1], hidden[i], rtol=1e-5, atol=1e-5)
        for got, expected in zip(got_keys + got_values, keys + values):
            torch.testing.assert_close(got[i, :, :n], expected[i, :, :n], rtol=1e-5, atol=1e-5)


def test_the_fixed_shape_prefill_gives_the_eager_codes_and_records_each_bucket_once(golden):
    eager = _decode(golden, None)
    seen: list[tuple[int, int]] = []

    class Watching(FixedShapePrefill):
        def run(self, transformer, rows):
            lengths = [r.shape[1] for r in rows]
            seen.append((1 << (len(rows) - 1).bit_length(), -(-max(lengths) // self.length_bucket)))
            return super().run(transformer, rows)

    prefill = Watching(prefill_forward, record=call_directly, length_bucket=16)
    rows = _decode(golden, prefill)
    assert prefill.disabled is None
    assert [r.codes for r in rows] == [r.codes for r in eager]
    for a, b in zip(rows, eager):
        torch.testing.assert_close(torch.stack(a.latents), torch.stack(b.latents), rtol=1e-4, atol=1e-4)
    assert len(seen) >= 4 and len(set(seen)) >= 3, "groups of 1, 2 and 4 rows, prefixes of several lengths"
    assert prefill.recordings == len(set(seen)) and prefill.replays == len(seen) - len(set(seen))
    again = _decode(golden, prefill)  # the same buckets again: replayed, none recorded
    assert prefill.recordings == len(set(seen)) and [r.codes for r in again] == [r.codes for r in eager]


def test_a_prefill_recording_that_fails_or_differs_turns_its_graphs_off_and_changes_no_code(golden, caplog):
    def wrong(step):
        def replay():
            hidden, keys, values = step()
            return hidden, [k + 1.0 for k in keys], values
        return replay

    eager = _decode(golden, None)
    for recorder, why in ((refused, "recording the prefill failed: operation not permitted"),
                          (wrong, "differs from the eager one")):
        prefill = FixedShapePrefill(prefill_forward, record=recorder)
        with caplog.at_level(logging.WARNING, logger="xtts_ft.inference.prefill_graph"):
            rows = _decode(golden, prefill)
        assert_turned_off_once(prefill, why, rows, eager, caplog.records, "prefill: CUDA graphs off")
        caplog.clear()


def test_a_prefix_longer_than_the_largest_bucket_is_prefilled_eagerly(golden):
    gpt = golden[0].gpt
    positions = int(gpt.gpt.config.n_positions)
    prefill = FixedShapePrefill(prefill_forward, record=call_directly, length_bucket=positions - 1)
    rows = prefill_rows(gpt, [_request(golden, "a much longer sentence than the others", 0).prefix])
    with torch.inference_mode():
        got = prefill.run(gpt.gpt, rows)
    assert rows[0].shape[1] < positions - 1 and prefill.recordings == 1  # one bucket of n_positions - 1
    long_rows = [torch.zeros(1, positions - 1 + 1, rows[0].shape[-1])]
    calls = []
    prefill.eager = lambda g, r: calls.append(len(r)) or got  # what the eager forward would do is not the point
    prefill.run(gpt.gpt, long_rows)
    assert calls == [1] and prefill.recordings == 1 and prefill.replays == 0


def test_the_shared_pool_recorder_hands_every_recording_the_same_pool(monkeypatch):
    from xtts_ft.inference import prefill_graph

    pools = []
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: ("pool", 1))
    monkeypatch.setattr(prefill_graph, "cuda_graph", lambda step, pool=None: pools.append(pool) or step)
    record = prefill_graph.shared_pool_graphs()
    record(lambda: 1)
    record(lambda: 2)
    assert pools == [("pool", 1), ("pool", 1)]


def test_every_bucket_reads_and_writes_the_same_shared_buffers_and_a_larger_group_runs_eagerly(golden):
    """A recording that kept its own outputs would keep every layer's keys and values per bucket (for XTTS-v2 in fp32
    about 0.25 MB per position): all buckets use views of one set of buffers, sized for ``positions`` rows x
    positions; a group of joins past that size is prefilled eagerly, and a row alone always fits."""
    gpt = golden[0].gpt
    prefill = FixedShapePrefill(prefill_forward, record=call_directly, length_bucket=8, positions=128)
    short, long_ = (prefill_rows(gpt, [_request(golden, t, 0).prefix]) for t in ("hi", TEXTS[1]))
    with torch.inference_mode():
        prefill.run(gpt.gpt, short), prefill.run(gpt.gpt, long_)  # recorded (the eager results given back)
        one, other = prefill.run(gpt.gpt, short), prefill.run(gpt.gpt, long_)  # replayed: views of what they wrote
        assert prefill.recordings == 2 and prefill.replays == 2 and short[0].shape[1] // 8 != long_[0].shape[1] // 8
        assert one[1][0].data_ptr() == other[1][0].data_ptr(), "both buckets' keys are views of one buffer"
        assert len(prefill._buffers) == 1
        grouped = prefill_rows(gpt, [_request(golden, t, 0).prefix for t in TEXTS[:5]])  # 8 rows x 32+ positions
        eager = prefill_forward(gpt.gpt, grouped)
        got = prefill.run(gpt.gpt, grouped)
    assert prefill.recordings == 2 and prefill.replays == 2, "past the buffers: neither recorded nor replayed"
    assert torch.equal(got[0], eager[0]) and got[3] == eager[3]


def test_the_warm_ups_recordings_cover_every_length_a_request_alone_can_have(golden):
    """BatchDecoder.record_prefills(longest): one recording per length bucket up to ``longest`` (zeros as inputs: each
    replay copies its own in), after which a request alone of any of those lengths replays without recording."""
    gpt = golden[0].gpt
    prefill = FixedShapePrefill(prefill_forward, record=call_directly, length_bucket=16)
    decoder = BatchDecoder(gpt, DecoderParts(step=FixedShapeStep(record=call_directly), max_rows=2, prefill=prefill))
    eager = _decode(golden, None, groups=((0,), (1,), (2,)))
    with torch.inference_mode():
        assert decoder.record_prefills(100) == 7 and prefill.recordings == 7  # 16, 32, ... 112 positions
        assert decoder.record_prefills(100) == 0, "recorded once"
        replays = prefill.replays
        rows = [_request(golden, t, i, sampling=_sampling_of(i), max_codes=25 + 5 * i) for i, t in enumerate(TEXTS[:3])]
        for row in rows:  # one by one, as callers alone
            decoder.join(row)
            while decoder.rows:
                decoder.step()
    assert prefill.recordings == 7 and prefill.replays == replays + 3 and prefill.disabled is None
    assert [r.codes for r in rows] == [r.codes for r in eager[:3]] and all(r.codes for r in rows)
    assert BatchDecoder(gpt).record_prefills(100) == 0  # no prefill graphs (the CPU's engine): nothing to record
