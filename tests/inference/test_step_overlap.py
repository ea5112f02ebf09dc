"""Decode steps launched before the step before them is read back (``DecoderParts(overlap=True)``, serve's decoder on
a card): on the CPU, where nothing runs ahead, every code must be what the decoder gives without overlap (and every
latent within a padded attention's rounding), through joins, leaves, a cancel and rows that finish while the next step
is already launched."""

from __future__ import annotations

import pytest
import torch

from tests.inference.golden import TEMPERATURE, golden_model
from tests.inference.test_batch_decode import COQUI, _request
from xtts_ft.inference.batch_decode import BatchDecoder, DecoderParts, Sampling
from xtts_ft.inference.decode_graph import FixedShapeStep, call_directly
from xtts_ft.inference.head_graph import FixedShapeHead


@pytest.fixture(scope="module")
def golden(tiny_base, am_vocab):
    return golden_model(tiny_base, am_vocab)


GREEDY = Sampling(temperature=TEMPERATURE, do_sample=False, repetition_penalty=1.0)
HOT = Sampling(temperature=1.3, top_k=20, top_p=0.95, repetition_penalty=2.0)


def _decoder(golden, fixed: bool, overlap: bool) -> BatchDecoder:
    if not fixed:
        return BatchDecoder(golden[0].gpt, DecoderParts(overlap=overlap))
    return BatchDecoder(golden[0].gpt, DecoderParts(step=FixedShapeStep(record=call_directly), max_rows=8,
                                                    head=FixedShapeHead(record=call_directly), overlap=overlap))


def _schedule(decoder, golden, sampling_of, long_codes: int):
    """Rows joining every other step, rows of 11 codes leaving early, one cancelled once it has 6 codes (by its codes,
    not by the step: with overlap a join reads the step in flight back early, so steps and codes fall differently)."""
    texts = ["hi", "a much longer sentence than the others here to pad the cache", "peter piper", "zebra",
             "the quick brown fox jumps", "xy"]
    rows = [_request(golden, t, i, sampling=sampling_of(i), max_codes=long_codes if i % 2 == 0 else 11)
            for i, t in enumerate(texts)]
    waiting, cancelled = list(rows), rows[2]
    with torch.inference_mode():
        for step in range(10 * long_codes):
            if waiting and step % 2 == 0:
                decoder.join(waiting.pop(0))
            if not waiting and not decoder.rows:
                break
            decoder.step()
            if any(r is cancelled for r in decoder.rows) and len(cancelled.codes) >= 6:
                decoder.drop([cancelled])  # (with overlap, its seventh code is in flight: never read)
    assert len(cancelled.codes) == 6 and not cancelled.done
    return rows


@pytest.mark.parametrize("fixed", [False, True], ids=["eager", "fixed-shapes"])
@pytest.mark.parametrize("settings", [[COQUI], [COQUI, HOT, GREEDY]], ids=["one-setting", "mixed"])
def test_overlapped_steps_give_every_code_and_latent_of_the_steps_without_overlap(golden, fixed, settings):
    def sampling_of(i):
        return settings[i % len(settings)]

    plain = _schedule(_decoder(golden, fixed, overlap=False), golden, sampling_of, 60)
    ahead = _decoder(golden, fixed, overlap=True)
    overlapped = _schedule(ahead, golden, sampling_of, 60)
    assert [r.codes for r in overlapped] == [r.codes for r in plain]
    for a, b in zip(overlapped, plain):
        # (a join reads the step in flight back early, so a row shares later steps with other rows than without
        # overlap: a padded attention's rounding, as when rows join and leave at other times)
        torch.testing.assert_close(torch.stack(a.latents), torch.stack(b.latents), rtol=1e-5, atol=1e-5)
        assert a.ended_with_stop == b.ended_with_stop and a.done == b.done
    assert not ahead.rows and ahead._in_flight is None


def test_a_step_is_in_flight_between_steps_and_a_join_reads_it_back_first(golden):
    decoder = _decoder(golden, fixed=False, overlap=True)
    first, second = _request(golden, "peter piper", 0, max_codes=40), _request(golden, "zebra", 1, max_codes=40)
    with torch.inference_mode():
        decoder.join(first)
        for _ in range(3):
            decoder.step()
        assert len(first.codes) == 4  # the prefill's code and one per step: never one ahead
        assert decoder._in_flight is not None and decoder._in_flight.rows == decoder.rows == [first]
        decoder.join(second)  # the step in flight was read back first: its code is the first request's fifth
        assert len(first.codes) == 5 and decoder._in_flight is None and decoder.rows == [first, second]
        decoder.drop([first])  # a cancel while a step is in flight: its code for the leaving row is never read
        decoder.step()
        decoder.step()
        assert len(first.codes) == 5 and len(second.codes) == 3
        assert decoder._in_flight is not None and decoder._in_flight.rows == [second]


def test_logits_that_are_not_finite_are_refused_when_their_step_is_read(golden):
    decoder = _decoder(golden, fixed=False, overlap=True)
    requests = [_request(golden, "hi", 0), _request(golden, "peter piper", 1)]
    choose, calls = decoder._choose, []

    def broken_second_row(requests_, seen, hidden):
        latents, codes, finite = choose(requests_, seen, hidden)
        calls.append(len(requests_))
        if len(calls) >= 4:  # the prefill's choice, then three steps fine
            finite = finite.clone()
            finite[1] = False
        return latents, codes, finite

    decoder._choose = broken_second_row
    with torch.inference_mode():
        decoder.join(*requests)
        decoder.step()
        decoder.step()  # launches the broken step, reads the one before
        with pytest.raises(RuntimeError, match="logits are not finite .* for 1 of 2 requests"):
            decoder.step()
    assert [len(r.codes) for r in requests] == [3, 3]


def test_the_decode_loop_with_overlap_gives_solo_codes_through_a_late_join_and_a_cancel(golden):
    """serve's loop on a card overlaps its steps (here forced on the CPU): a request that arrives while others decode
    (the step in flight is read back first and its codes handed on), and one cancelled mid-way, change no one's
    codes; the cancelled one's are the start of its own."""
    from tests.inference.test_batch_decode import _solo
    from tests.serve.test_engine_streaming import Gated
    from xtts_ft.inference.decoder_settings import DecoderSettings
    from xtts_ft.serve.decode_loop import DecodeLoop

    texts = ["hi", "a much longer sentence than the others here", "peter piper", "zebra"]
    loop = DecodeLoop(golden[0].gpt, max_active=8, settings=DecoderSettings(overlap=True))
    assert loop._decoder.parts.overlap and not DecodeLoop(golden[0].gpt, max_active=8)._decoder.parts.overlap  # (default: off)
    held = Gated(temperature=TEMPERATURE, hold_at=6)  # the second request's choices wait at its 7th: no race to its end
    requests = [_request(golden, t, i, sampling=held if i == 1 else COQUI) for i, t in enumerate(texts)]
    try:
        streams = [loop.submit(r) for r in requests[:3]]
        streams[0].wait(4, timeout=10.0)
        streams.append(loop.submit(requests[3]))
        streams[1].wait(3, timeout=10.0)
        streams[1].cancel()
        held.gate.set()
        for stream in streams:
            while not stream.finished:
                stream.wait(stream.produced, timeout=5.0)
    finally:
        held.gate.set()
        loop.close()
    solo = [_solo(golden, t, i) for i, t in enumerate(texts)]
    for i in (0, 2, 3):
        assert requests[i].codes == solo[i]
    assert 4 <= len(requests[1].codes) < len(solo[1]) and requests[1].codes == solo[1][:len(requests[1].codes)]
    assert loop.dropped == 1 and loop.largest_batch >= 3


def test_the_decode_path_makes_no_tensor_on_the_device_by_a_copy_that_waits():
    """``torch.tensor(values, device=cuda)`` copies from pageable memory and first waits for everything queued on the
    stream: with a step in flight, a leave's index (or a group's, or a prefill's last positions) would wait for that
    step and undo the overlap. The decode path makes such tensors with ``decode_cache.indices`` (pinned, no wait)."""
    import inspect
    import re

    from xtts_ft.inference import (
        batch_decode,
        decode_cache,
        decode_graph,
        head_graph,
        prefill_graph,
        step_in_flight,
        streaming_vocoder,
    )
    from xtts_ft.serve import decode_loop, engine

    blocking = re.compile(r"torch\.(?:tensor|as_tensor)\((?:[^()]|\([^()]*\))*device=")
    for module in (batch_decode, decode_cache, decode_graph, head_graph, prefill_graph, step_in_flight, decode_loop,
                   engine, streaming_vocoder):
        found = blocking.findall(inspect.getsource(module))
        assert not found, f"{module.__name__}: {found}"
    assert blocking.search("torch.tensor([a, len(b)], dtype=torch.long, device=x.device)")  # (the pattern finds one)
