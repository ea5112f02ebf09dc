"""The decode step of fixed shapes that a CUDA graph replays, run on the CPU with a recorder that records nothing.

What a GPU adds (the recording and the replay) is checked by the step itself at every recording against the
eager step; here: the fixed-shape step computes the eager step's numbers through joins, leaves, a cancel and
moves of the window inside the static cache, each fixed shape is recorded once, and a recording that fails or
differs turns the graphs off without changing a code.
"""

from __future__ import annotations

import logging
import random

import pytest
import torch

from tests.inference.golden import TEMPERATURE, golden_model
from tests.inference.recorders import StandInCuda, assert_turned_off_once, refused, tf32_like
from tests.inference.test_batch_decode import COQUI, _request, _run_schedule
from xtts_ft.config import ServeConfig
from xtts_ft.inference.batch_decode import BatchDecoder, DecoderParts, Sampling, prefill_forward
from xtts_ft.inference.decode_graph import COLUMN_BUCKET, FixedShapeStep, StaticSlotCache, call_directly
from xtts_ft.inference.decoder_settings import decoder_settings
from xtts_ft.inference.head_graph import FixedShapeHead
from xtts_ft.inference.prefill_graph import FixedShapePrefill
from xtts_ft.serve.engine import new_vocoder_stream

CARD = decoder_settings(torch.device("cuda"), ServeConfig())  # what SpeechEngine decides on a card


@pytest.fixture(scope="module")
def golden(tiny_base, am_vocab):
    return golden_model(tiny_base, am_vocab)


HOT = Sampling(temperature=1.3, top_k=20, top_p=0.95, repetition_penalty=2.0)
GREEDY = Sampling(temperature=TEMPERATURE, do_sample=False, repetition_penalty=1.0)
SETTINGS = [COQUI, HOT, GREEDY]


def _sampling_of(i: int) -> Sampling:
    return SETTINGS[i % len(SETTINGS)]


def _decode(golden, fixed: FixedShapeStep | None, long_codes: int = 200, bucket: int = COLUMN_BUCKET):
    decoder = BatchDecoder(golden[0].gpt, DecoderParts(step=fixed, max_rows=8 if fixed else None))
    if fixed is not None and bucket != COLUMN_BUCKET:  # smaller buckets: more shapes and moves in a short run
        decoder._cache = StaticSlotCache(golden[0].gpt.gpt, rows=8, column_bucket=bucket)
    return decoder, _run_schedule(decoder, golden, _sampling_of, long_codes)


class _ShapeChecking(FixedShapeStep):
    """Records the fixed shape of every step and whether it covers the batch tightly."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.shapes: list[tuple[int, int]] = []
        self.loose: list[str] = []

    def run(self, cache, embeddings):
        rows, columns = cache.fixed_shape()
        self.shapes.append((rows, columns))
        if not (cache.rows <= rows < 2 * cache.rows and rows & (rows - 1) == 0):
            self.loose.append(f"{rows} rows for a batch of {cache.rows}")
        if not cache.end < columns <= cache.end + cache.bucket:
            self.loose.append(f"{columns} columns for a step writing column {cache.end}")
        return super().run(cache, embeddings)


def test_the_fixed_shape_step_gives_the_eager_steps_codes(golden):
    eager_decoder, eager = _decode(golden, None)
    fixed = _ShapeChecking(record=call_directly)
    decoder, rows = _decode(golden, fixed, bucket=32)
    assert fixed.disabled is None
    assert [r.codes for r in rows] == [r.codes for r in eager]
    for a, b in zip(rows, eager):
        torch.testing.assert_close(torch.stack(a.latents), torch.stack(b.latents), rtol=1e-5, atol=1e-5)
    cache = decoder._cache
    assert cache.layouts == 1, "the buffers are allocated once"
    assert cache.moves >= 2, "the window moved inside them: a longer prefix joined, rows left"
    assert fixed.loose == [], "each step computes the batch's rows and columns rounded up, no more"
    met = set(fixed.shapes)
    assert len(met) >= 4, "rows joined and left, the window grew past buckets"
    # each shape recorded the first time a step needed it, replayed every later time, whatever came between
    assert fixed.recordings == len(met) and fixed.replays == len(fixed.shapes) - len(met)


def test_a_static_cache_that_does_not_fit_is_laid_out_as_needed_and_decodes_the_same(golden, caplog):
    """Out of memory at the one allocation (a small card, many --max-active-streams): one warning, then the cache
    grows as the ordinary one does and the graphs are recorded per layout; the codes are the eager step's."""
    _, eager = _decode(golden, None, long_codes=60)
    fixed = FixedShapeStep(record=call_directly)
    decoder = BatchDecoder(golden[0].gpt, DecoderParts(step=fixed, max_rows=8))
    cache = decoder._cache
    real, calls = cache._relayout, []

    def out_of_memory_first(*args):
        calls.append(args[:2])
        if len(calls) == 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 5.00 GiB")
        return real(*args)

    cache._relayout = out_of_memory_first
    with caplog.at_level(logging.WARNING, logger="xtts_ft.inference.decode_graph"):
        rows = _run_schedule(decoder, golden, _sampling_of, 60)
    assert calls[0] == (cache.capacity_rows, cache.capacity_columns) and len(calls) >= 3, "then laid out as needed"
    assert not cache.static and fixed.disabled is None and fixed.recordings >= 2
    assert [r.codes for r in rows] == [r.codes for r in eager]
    warnings = [r.message for r in caplog.records if "do not fit" in r.message]
    assert len(warnings) == 1 and f"decode cache: 8 rows x {cache.capacity_columns} positions" in warnings[0]


def test_the_static_cache_refuses_more_rows_or_a_longer_row_than_it_holds(golden):
    gpt = golden[0].gpt
    cache = StaticSlotCache(gpt.gpt, rows=3)
    assert cache.capacity_rows == 4 and cache.capacity_columns % COLUMN_BUCKET == 0
    assert cache.capacity_columns > gpt.gpt.config.n_positions
    heads, dim = gpt.gpt.config.n_head, gpt.gpt.config.n_embd // gpt.gpt.config.n_head

    def row(length: int) -> list[torch.Tensor]:
        return [torch.zeros(1, heads, length, dim) for _ in gpt.gpt.h]

    for _ in range(4):
        cache.add(row(5), row(5))
    with pytest.raises(ValueError, match="holds 4 rows"):
        cache.add(row(5), row(5))
    cache.keep([])
    with pytest.raises(ValueError, match=f"does not fit the decode cache's {cache.capacity_columns} columns"):
        cache.add(row(cache.capacity_columns), row(cache.capacity_columns))
    assert cache.layouts == 1


class _MarkChecking(FixedShapeStep):
    """Counts, at every step, the buffer rows with nothing to attend to at the column being written."""

    unmarked = 0

    def run(self, cache, embeddings):
        self.unmarked += int((~cache.mask[:, cache.end]).sum())
        return super().run(cache, embeddings)


def test_rows_past_the_batch_stay_finite_and_rows_that_join_there_decode_as_alone(golden):
    """A fixed-shape step computes every buffer row; rows that left leave places a new row reuses. Each row past the
    batch attends to its own current column (with nothing to attend to, attention gives NaN on some kernels: not on
    this CPU's, which gives zeros, so the mark itself is checked)."""
    fixed = _MarkChecking(record=call_directly)
    decoder, rows = _decode(golden, fixed, long_codes=60)
    cache = decoder._cache
    assert fixed.disabled is None and fixed.unmarked == 0
    for buffers in (cache.keys, cache.values):
        assert all(bool(torch.isfinite(b).all()) for b in buffers)
    eager_decoder, eager = _decode(golden, None, long_codes=60)
    assert [r.codes for r in rows] == [r.codes for r in eager]


def test_a_request_after_the_batch_emptied_replays_the_recorded_step(golden):
    """With graphs the cache keeps its buffers when the last row leaves, so a request alone after another is not
    recorded again (a recording costs about three eager steps); without, the buffers are freed."""
    def alone_one_after_another(fixed):
        decoder = BatchDecoder(golden[0].gpt, DecoderParts(step=fixed, max_rows=8 if fixed else None))
        requests = [_request(golden, "peter piper picked", 1, max_codes=30), _request(golden, "zebra", 2, max_codes=30)]
        recordings = []
        with torch.inference_mode():
            for request in requests:
                decoder.join(request)
                while decoder.rows:
                    decoder.step()
                recordings.append(fixed.recordings if fixed else None)
        return decoder._cache, requests, recordings

    eager_cache, eager, _ = alone_one_after_another(None)
    assert eager_cache.mask is None and eager_cache.keys == []  # freed
    fixed = FixedShapeStep(record=call_directly)
    cache, graphed, recordings = alone_one_after_another(fixed)
    assert recordings == [1, 1] and fixed.disabled is None and fixed.replays > 40
    assert cache.mask is not None and cache.layouts == 1  # kept, never laid out again
    assert [r.codes for r in graphed] == [r.codes for r in eager] and all(len(r.codes) == 30 for r in eager)


def test_a_recording_that_fails_or_differs_turns_graphs_off_and_changes_no_code(golden, caplog):
    def wrong(step):
        return lambda: step() + 1.0

    _, eager = _decode(golden, None, long_codes=40)
    for recorder, why in ((refused, "recording the decode step failed: operation not permitted"),
                          (wrong, "differs from the eager one")):
        fixed = FixedShapeStep(record=recorder)
        with caplog.at_level(logging.WARNING, logger="xtts_ft.inference.decode_graph"):
            _, rows = _decode(golden, fixed, long_codes=40)
        assert_turned_off_once(fixed, why, rows, eager, caplog.records, "CUDA graphs off")
        caplog.clear()


def test_the_cuda_recorder_warms_up_records_once_and_replays_without_running_the_step(monkeypatch):
    """torch.cuda's graph API stood in for (no GPU here): the order of the calls the recorder makes."""
    import contextlib

    from xtts_ft.inference import decode_graph

    events: list[str] = []

    class FakeGraph:
        def capture_begin(self, pool=None, capture_error_mode="global"):
            events.append(f"begin {capture_error_mode}" + (f" pool {pool}" if pool else ""))

        def capture_end(self):
            events.append("end")

        def replay(self):
            events.append("replay")

    class FakeStream:
        def __init__(self, device=None, priority=0):
            pass

        def wait_stream(self, other):
            events.append("wait")

    monkeypatch.setattr(torch.cuda, "CUDAGraph", FakeGraph)
    monkeypatch.setattr(torch.cuda, "Stream", FakeStream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: FakeStream())
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "stream", lambda _s: contextlib.nullcontext())
    monkeypatch.setattr(decode_graph, "_capture_streams", {})
    output = torch.ones(2)

    def step():
        events.append("step")
        return output

    replay = decode_graph.cuda_graph(step)
    assert events == ["wait", "step", "begin thread_local", "step", "end", "wait"]
    events.clear()
    assert replay() is output and replay() is output
    assert events == ["replay", "replay"], "a replay launches the graph; the Python step does not run again"


def test_no_recording_is_captured_on_the_vocoders_stream_however_many_are_made(monkeypatch):
    """c10 hands out new CUDA streams in turn from a pool of 32 (stood in for here), and the engine's vocoder stream is
    one of them: a new stream per recording was the vocoder's every 32nd time. 100 recordings, other streams drawn
    before and between them (other libraries, a second engine): every one is captured on the one capture stream,
    which is neither engine's vocoder stream."""
    from xtts_ft.inference import decode_graph

    cuda = StandInCuda(pool_size=32)
    cuda.install(monkeypatch)
    draws = random.Random(47)
    for _ in range(draws.randrange(32)):
        torch.cuda.Stream()
    vocoder = new_vocoder_stream(torch.device("cuda"), CARD)  # what SpeechEngine makes at its start
    for i in range(100):
        decode_graph.cuda_graph(lambda: torch.ones(1))
        for _ in range(draws.randrange(3)):
            torch.cuda.Stream()
        if i == 50:
            second = new_vocoder_stream(torch.device("cuda"), CARD)  # a second engine in the same process
    assert len(cuda.captured_on) == 100 and cuda.current == cuda.default, "each recording gives the stream back"
    assert vocoder not in cuda.captured_on and second not in cuda.captured_on
    assert len(set(cuda.captured_on)) == 1 and cuda.default not in cuda.captured_on, "one capture stream, made once"
    for device, setting in (("cuda", "off"), ("cpu", "auto")):
        chosen = decoder_settings(torch.device(device), ServeConfig(vocoder_stream=setting))
        assert new_vocoder_stream(torch.device(device), chosen) is None


@pytest.mark.parametrize("tf32", [False, True], ids=["tf32-off", "tf32-on"])
def test_the_recordings_verdict_is_the_same_whatever_tf32_says(golden, monkeypatch, tf32):
    """A training run in the same process may have turned TF32 on (the GPU smoke test's section 2); on a card the
    recorded step, head and prefill (other shapes than the eager ones) then round their products differently and
    differ from the eager computation by more than fp32's tolerance. TF32 is off while each is recorded and checked,
    so the graphs stay on either way, and the setting is given back after each recording."""
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", tf32)
    step, head = FixedShapeStep(record=tf32_like), FixedShapeHead(record=tf32_like)
    prefill = FixedShapePrefill(prefill_forward, record=tf32_like)
    decoder = BatchDecoder(golden[0].gpt, DecoderParts(step=step, max_rows=8, head=head, prefill=prefill))
    _run_schedule(decoder, golden, lambda i: COQUI, long_codes=20)
    assert [part.disabled for part in (step, head, prefill)] == [None, None, None]
    assert step.recordings and head.recordings and prefill.recordings and step.replays
    assert torch.backends.cuda.matmul.allow_tf32 is tf32


def test_the_mlp_is_hugging_faces_exactly_unless_fused_and_fused_is_one_gelu_kernel(golden):
    """``decode_cache.mlp``: unfused, bit for bit ``block.mlp``; fused, the same products with ``F.gelu``'s tanh form
    (within an ulp of NewGELU's eight operations, in one); another activation is left to its own module."""
    import copy

    from torch.profiler import ProfilerActivity, profile

    from xtts_ft.inference.decode_cache import mlp

    block = golden[0].gpt.gpt.h[0]
    x = torch.randn(3, 1, golden[0].gpt.gpt.config.n_embd, generator=torch.Generator().manual_seed(0)) * 3
    with torch.inference_mode():
        exact, fused = mlp(block, x), mlp(block, x, fused_gelu=True)
        assert torch.equal(exact, block.mlp(x))
        layer = block.mlp
        assert torch.equal(fused, layer.c_proj(torch.nn.functional.gelu(layer.c_fc(x), approximate="tanh")))
        assert float((fused - exact).abs().max()) <= 1e-5 * float(exact.abs().max())

        def operations(fused_gelu: bool) -> int:
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                mlp(block, x, fused_gelu)
            return sum(1 for e in prof.events() if e.name.startswith("aten::") and
                       (e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::")))

        assert operations(False) - operations(True) >= 7  # pow, 4 products, 2 sums, tanh -> one gelu
        relu = copy.deepcopy(block)
        relu.mlp.act = torch.nn.ReLU()
        assert torch.equal(mlp(relu, x, fused_gelu=True), relu.mlp(x))


def test_recordings_with_the_fused_gelu_stay_within_the_eager_steps_tolerance(golden, monkeypatch):
    """serve's recorded steps and prefills run the fused GELU (checked against the eager, exact ones at each
    recording): none turns off, the latents stay within rounding, and greedy rows keep the eager codes."""
    from xtts_ft.inference import decode_cache, prefill_graph
    from xtts_ft.inference.batch_decode import prefill_forward
    from xtts_ft.inference.prefill_graph import FixedShapePrefill

    _, eager = _decode(golden, None, long_codes=60)
    fused_calls = {"step": 0, "prefill": 0}
    real_mlp = decode_cache.mlp

    def counting(where):
        def mlp(block, x, fused_gelu=False):
            fused_calls[where] += fused_gelu
            return real_mlp(block, x, fused_gelu)
        return mlp

    monkeypatch.setattr(prefill_graph, "mlp", counting("prefill"))
    monkeypatch.setattr(decode_cache, "mlp", counting("step"))
    fixed = FixedShapeStep(record=call_directly, fused_gelu=True)
    prefill = FixedShapePrefill(prefill_forward, record=call_directly, fused_gelu=True)
    decoder = BatchDecoder(golden[0].gpt, DecoderParts(step=fixed, max_rows=8, prefill=prefill))
    rows = _run_schedule(decoder, golden, _sampling_of, 60)
    assert fixed.disabled is None and prefill.disabled is None and fixed.recordings >= 2 and prefill.recordings >= 2
    greedy = [i for i in range(len(rows)) if _sampling_of(i) == GREEDY]
    assert greedy and all(rows[i].codes == eager[i].codes for i in greedy)
    for i in greedy:
        torch.testing.assert_close(torch.stack(rows[i].latents), torch.stack(eager[i].latents), rtol=1e-4, atol=1e-4)
    assert fused_calls["step"] > 0 and fused_calls["prefill"] > 0, "the recorded ones ran the fused GELU"


def test_the_attention_mask_is_made_additive_once_per_step_and_the_numbers_stay_the_same(golden, monkeypatch):
    """SDPA turns a boolean mask into an additive one in every layer (a where and a scalar each: two kernels per
    layer on a card); the step makes it once. Given the boolean mask again, every code and latent is the same, bit
    for bit, in the eager and the fixed-shape step alike."""
    from torch.profiler import ProfilerActivity, profile

    from xtts_ft.inference import decode_cache

    def conversions_in_attention(decoder) -> int:
        with torch.inference_mode(), profile(activities=[ProfilerActivity.CPU]) as prof:
            decoder.step()
        count = 0
        for event in prof.events():
            parent = event.cpu_parent
            while parent is not None and parent.name != "aten::scaled_dot_product_attention":
                parent = parent.cpu_parent
            count += parent is not None and event.name in ("aten::where", "aten::scalar_tensor")
        return count

    def run(fixed: bool):
        decoder = BatchDecoder(golden[0].gpt, DecoderParts(step=FixedShapeStep(record=call_directly) if fixed else None,
                                                            max_rows=4 if fixed else None))
        requests = [_request(golden, "a much longer sentence than the others", 0, max_codes=30),
                    _request(golden, "hi", 1, max_codes=30)]
        with torch.inference_mode():
            decoder.join(*requests)  # rows of different lengths: the window step's mask is not None either
            decoder.step()
        converted = conversions_in_attention(decoder)
        with torch.inference_mode():
            while decoder.rows:
                decoder.step()
        return requests, converted

    layers = len(golden[0].gpt.gpt.h)
    for fixed in (False, True):
        once, converted = run(fixed)
        assert converted == 0
        with monkeypatch.context() as m:
            m.setattr(decode_cache, "additive", lambda mask, dtype: mask)  # the boolean mask to every layer, as before
            per_layer, converted_before = run(fixed)
        assert converted_before >= 2 * layers
        assert [r.codes for r in once] == [r.codes for r in per_layer]
        for a, b in zip(once, per_layer):
            assert torch.equal(torch.stack(a.latents), torch.stack(b.latents))
