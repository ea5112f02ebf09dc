"""The batched decoder: golden codes, coqui's own codes when alone, and rows that do not depend on each other.

The model is the tiny random one with its attention made to matter (tests/inference/golden.py), so the
codes depend on the text, the voice and every earlier code.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.inference.golden import (
    MAX_CODES,
    SEEDS,
    TEMPERATURE,
    TEXTS,
    CodeRecorder,
    coqui_codes,
    golden_model,
    read_golden,
)
from xtts_ft.inference.batch_decode import BatchDecoder, DecodeRequest, DecoderParts, Sampling, decode_all, prefix_embeddings


@pytest.fixture(scope="module")
def golden(tiny_base, am_vocab):
    return golden_model(tiny_base, am_vocab)


COQUI = Sampling(temperature=TEMPERATURE)  # Xtts.inference's settings at the evaluation's temperature


def _request(golden, text: str, seed: int, sampling: Sampling = COQUI, max_codes: int = MAX_CODES) -> DecodeRequest:
    xtts, tokenizer, latents = golden
    tokens = torch.IntTensor(tokenizer.encode(text.strip().lower(), lang="am")).unsqueeze(0)
    with torch.inference_mode():
        return DecodeRequest(prefix_embeddings(xtts.gpt, latents[0], tokens), max_codes, sampling, seed)


def _solo(golden, text, seed, **kw) -> list[int]:
    request = _request(golden, text, seed, **kw)
    with torch.inference_mode():
        decode_all(golden[0].gpt, [request])
    return request.codes


def test_golden_codes_hold(golden):
    """coqui's Xtts.inference still gives the checked-in codes (a dependency upgrade that changes them fails here;
    regenerate with tests/assets/make_golden_codes.py only after a deliberate change of the model or texts)."""
    xtts, _tokenizer, latents = golden
    recorded = read_golden()
    assert recorded["texts"] == TEXTS and recorded["seeds"] == SEEDS
    assert len({tuple(c) for c in recorded["codes"]}) == len(TEXTS), "each text its own codes"
    assert [coqui_codes(xtts, latents, t, s) for t, s in zip(TEXTS, SEEDS)] == recorded["codes"]


def test_alone_the_decoder_gives_exactly_coquis_codes(golden):
    recorded = read_golden()["codes"]
    assert [_solo(golden, t, s) for t, s in zip(TEXTS, SEEDS)] == recorded
    # greedy too (coqui's do_sample=False), and a text that is not in the golden file
    xtts, _tokenizer, latents = golden
    greedy = Sampling(temperature=TEMPERATURE, do_sample=False)
    assert _solo(golden, "zebra crossing", 7, sampling=greedy) == coqui_codes(xtts, latents, "zebra crossing", 7,
                                                                               do_sample=False)
    assert _solo(golden, "zebra crossing", 7) == coqui_codes(xtts, latents, "zebra crossing", 7)


def test_latents_are_coquis_second_pass(golden):
    """The latents handed to HiFiGAN: coqui recomputes them with a second forward pass; ours come with the codes."""
    from transformers import StoppingCriteriaList

    from xtts_ft.evaluate.synthesis import gpt_ready_for_inference

    xtts, _tokenizer, latents = golden
    request = _request(golden, TEXTS[0], SEEDS[0])
    with torch.inference_mode(), gpt_ready_for_inference(xtts, MAX_CODES), torch.random.fork_rng(devices=[]):
        decode_all(xtts.gpt, [request])
        torch.manual_seed(SEEDS[0])
        out = xtts.inference(TEXTS[0], "am", latents[0], latents[1], temperature=TEMPERATURE,
                             stopping_criteria=StoppingCriteriaList([CodeRecorder()]))
    theirs = torch.as_tensor(out["gpt_latents"])[0]
    ours = torch.stack(request.latents)
    assert ours.shape == theirs.shape == (MAX_CODES, xtts.gpt.model_dim)
    assert torch.allclose(ours, theirs, atol=1e-4), (ours - theirs).abs().max()


def test_eight_batched_greedy_requests_each_give_their_solo_codes(golden):
    greedy = Sampling(temperature=TEMPERATURE, do_sample=False)
    texts = TEXTS + ["zebra", "a much longer sentence than the others here", "xy"]
    solo = [_solo(golden, t, i, sampling=greedy) for i, t in enumerate(texts)]
    assert len({tuple(c) for c in solo}) > 1
    batch = [_request(golden, t, i, sampling=greedy) for i, t in enumerate(texts)]
    decoder = BatchDecoder(golden[0].gpt)
    with torch.inference_mode():
        for request in batch:  # prefixes of different lengths: left padding in the joint cache
            decoder.join(request)
        assert len(decoder) == 8
        while decoder.rows:
            decoder.step()
    assert [r.codes for r in batch] == solo


def test_sampled_codes_do_not_change_when_others_join_leave_or_cancel(golden):
    """Per-row settings and generators: staggered joins, short rows leaving early, one row cancelled mid-batch."""
    texts = TEXTS
    solo = [_solo(golden, t, s) for t, s in zip(texts, SEEDS)]
    hot = Sampling(temperature=1.3, top_k=20, top_p=0.95, repetition_penalty=2.0)
    solo_hot = _solo(golden, "hot row", 9, sampling=hot)
    rows = [_request(golden, t, s, max_codes=MAX_CODES if i % 2 else 9) for i, (t, s) in enumerate(zip(texts, SEEDS))]
    other = _request(golden, "hot row", 9, sampling=hot)
    victim = _request(golden, "this one is cancelled", 5)
    decoder = BatchDecoder(golden[0].gpt)
    with torch.inference_mode():
        decoder.join(victim)
        decoder.join(rows[0])
        for step in range(MAX_CODES * 2):
            if step < len(rows) - 1:
                decoder.join(rows[step + 1])  # one more joins at each of the first steps
            if step == 3:
                decoder.join(other)
            if step == 6:
                assert victim in decoder.rows and len(victim.codes) == 7
                decoder.drop([victim])  # its reader went away
            decoder.step()
        assert not decoder.rows
    assert [r.codes for r in rows] == [c if i % 2 else c[:9] for i, c in enumerate(solo)]
    assert other.codes == solo_hot and len(victim.codes) == 7 and not victim.done
    assert all(r.done and not r.ended_with_stop for r in rows)


def test_a_stop_code_ends_a_row_and_only_that_row(golden):
    xtts = golden[0]
    bias = xtts.gpt.mel_head.bias
    saved = bias.detach().clone()
    try:
        with torch.no_grad():
            bias[xtts.gpt.stop_audio_token] += 1e4  # the stop code is chosen at once
        stopper = _request(golden, "stop", 0)
        with torch.inference_mode():
            decode_all(xtts.gpt, [stopper])
    finally:
        with torch.no_grad():
            bias.copy_(saved)
    assert stopper.codes == [xtts.gpt.stop_audio_token] and stopper.ended_with_stop and stopper.done


def test_evaluation_samples_in_one_batch_sound_as_coquis_one_by_one(golden, tmp_path):
    """synthesize_samples decodes all samples together; each still sounds as Xtts.inference makes it alone."""
    import soundfile as sf

    from tests.inference.golden import VOICE
    from xtts_ft.evaluate.synthesis import synthesize_samples

    xtts, tokenizer, latents = golden
    texts = TEXTS[:3]
    results = synthesize_samples(xtts, tokenizer, texts, [VOICE], tmp_path, language="am", temperature=TEMPERATURE,
                                 seed=3, max_new_tokens=MAX_CODES)
    for text, result in zip(texts, results):
        with torch.inference_mode(), torch.random.fork_rng(devices=[]):
            from xtts_ft.evaluate.synthesis import gpt_ready_for_inference

            with gpt_ready_for_inference(xtts, MAX_CODES):
                torch.manual_seed(3)
                theirs = xtts.inference(text, "am", latents[0], latents[1], temperature=TEMPERATURE)["wav"]
        ours, _sr = sf.read(str(result.path), dtype="float32")
        theirs = np.clip(np.asarray(theirs, dtype=np.float32).reshape(-1), -1.0, 1.0)
        assert ours.shape == theirs.shape and result.n_codes == MAX_CODES
        assert np.abs(ours - theirs).max() <= 2e-4 + 2 / 32768, text  # PCM16 on disk


def _run_schedule(decoder, golden, sampling_of, long_codes: int):
    """Rows joining at different steps (a long prefix right after a short one, so the cache is laid out again),
    rows leaving early, one cancelled, enough steps that the cache grows: the requests, decoded to the end."""
    texts = ["hi", "a much longer sentence than the others here to pad the cache", "peter piper", "zebra",
             "the quick brown fox jumps", "xy"]
    rows = [_request(golden, t, i, sampling=sampling_of(i), max_codes=long_codes if i % 2 == 0 else 11)
            for i, t in enumerate(texts)]
    with torch.inference_mode():
        waiting = list(rows)
        for step in range(10 * long_codes):
            if waiting and step % 2 == 0:
                decoder.join(waiting.pop(0))
            if step == 9 and any(r is rows[2] for r in decoder.rows):
                decoder.drop([rows[2]])  # cancelled mid-batch
            if not waiting and not decoder.rows:
                break
            decoder.step()
    return rows


@pytest.mark.parametrize("mixed", [False, True], ids=["one-setting", "mixed-settings"])
def test_the_decoder_computes_exactly_what_the_reference_decoder_computes(golden, mixed):
    """The cache written in place and the batched choice give the first decoder's codes and latents, bit for bit
    (the reference: a DynamicCache concatenated at every step, each row chosen on its own)."""
    from xtts_ft.inference.batch_decode_reference import ReferenceDecoder

    hot = Sampling(temperature=1.3, top_k=20, top_p=0.95, repetition_penalty=2.0)
    greedy = Sampling(temperature=TEMPERATURE, do_sample=False, repetition_penalty=1.0)
    settings = [COQUI, hot, greedy] if mixed else [COQUI]

    def sampling_of(i):
        return settings[i % len(settings)]

    long_codes = 250  # past the cache's first columns (it is laid out again while rows decode); the tiny GPT's limit: 260
    decoder = BatchDecoder(golden[0].gpt)
    ours = _run_schedule(decoder, golden, sampling_of, long_codes)
    theirs = _run_schedule(ReferenceDecoder(golden[0].gpt), golden, sampling_of, long_codes)
    assert [len(r.codes) for r in ours] == [len(r.codes) for r in theirs]
    assert decoder._cache.layouts >= 3, "allocated, laid out for a longer prefix, grown"
    assert len(ours[2].codes) < 11  # cancelled
    assert [r.codes for r in ours] == [r.codes for r in theirs]
    for a, b in zip(ours, theirs):
        assert torch.equal(torch.stack(a.latents), torch.stack(b.latents))


def test_batched_choice_equals_transformers_processors_row_by_row():
    """Sampling.choose on many rows at once picks each row's code as transformers' processors pick it alone."""
    from xtts_ft.inference.batch_decode_reference import choose_one

    rows, vocab = 6, 300
    draw = torch.Generator().manual_seed(0)
    for sampling in [Sampling(), Sampling(temperature=1.3, top_k=0, top_p=1.0, repetition_penalty=1.0),
                     Sampling(top_k=5, top_p=0.5, repetition_penalty=3.0),
                     Sampling(do_sample=False), Sampling(do_sample=False, repetition_penalty=1.0)]:
        for _ in range(20):
            logits = torch.randn(rows, vocab, generator=draw) * 4
            seen_ids = [torch.randint(0, vocab, (1, 1 + i * 7), generator=draw) for i in range(rows)]
            seen = torch.zeros(rows, vocab, dtype=torch.bool)
            for i, ids in enumerate(seen_ids):
                seen[i, ids[0]] = True
            seeds = torch.randint(0, 2**31, (rows,), generator=draw).tolist()
            batched = sampling.choose(logits, seen, [torch.Generator().manual_seed(s) for s in seeds]).tolist()
            alone = [choose_one(sampling, logits[i:i + 1], seen_ids[i], torch.Generator().manual_seed(s))
                     for i, s in enumerate(seeds)]
            assert batched == alone, sampling


def test_a_gpt_the_decoder_cannot_run_is_refused_in_one_line(golden):
    xtts = golden[0]
    config = xtts.gpt.gpt.config
    saved = config._attn_implementation
    try:
        config._attn_implementation = "eager"
        with pytest.raises(ValueError, match="attention is 'eager'"):
            BatchDecoder(xtts.gpt)
    finally:
        config._attn_implementation = saved


def test_the_cache_stays_near_what_its_rows_need_and_is_freed_when_they_leave(golden):
    from xtts_ft.inference.decode_cache import HEADROOM_COLUMNS

    xtts = golden[0]
    bias = xtts.gpt.mel_head.bias
    saved = bias.detach().clone()
    rows = [_request(golden, "a much longer sentence than the others here" if i == 0 else "hi", i, max_codes=40 * (i + 1))
            for i in range(5)]
    decoder = BatchDecoder(xtts.gpt)
    cache = decoder._cache
    shapes = set()
    try:
        with torch.no_grad():
            bias[xtts.gpt.stop_audio_token] -= 1e4  # no row stops before its code limit
        with torch.inference_mode():
            for request in rows:
                decoder.join(request)
            while decoder.rows:
                decoder.step()
                if decoder.rows:
                    need = cache.end - cache.start
                    shapes.add(tuple(cache.mask.shape))
                    assert cache.mask.shape[1] <= max(need, cache._longest) + 2 * HEADROOM_COLUMNS + 1
                    assert cache.mask.shape[0] <= 8  # 5 rows: a power of two above
    finally:
        with torch.no_grad():
            bias.copy_(saved)
    assert [len(r.codes) for r in rows] == [40 * (i + 1) for i in range(5)]
    assert any(s[0] == 8 for s in shapes) and any(s[0] < 8 for s in shapes)  # rows left: the buffers shrank
    assert cache.keys == [] and cache.mask is None  # the last row left: nothing held


def test_requests_prefilled_together_decode_as_they_do_alone(golden):
    """Prefixes of different lengths in one right-padded prefill: each row's first hidden state and keys are its
    solo prefill's (up to float rounding of the wider products), and each request decodes its solo codes."""
    from xtts_ft.inference.batch_decode import prefill

    texts = ["hi", "a much longer sentence than the others here", "peter piper", "zebra crossing"]
    solo = [_solo(golden, t, i) for i, t in enumerate(texts)]
    gpt = golden[0].gpt
    batch = [_request(golden, t, i) for i, t in enumerate(texts)]
    with torch.inference_mode():
        hidden, keys, _values, lengths = prefill(gpt, [r.prefix for r in batch])
        for i, request in enumerate(batch):
            alone_hidden, alone_keys, _, (length,) = prefill(gpt, [request.prefix])
            assert lengths[i] == length and len(set(lengths)) == len(texts)
            assert torch.allclose(hidden[i], alone_hidden[0], atol=1e-5)
            assert all(torch.allclose(k[i, :, :length], a[0], atol=1e-5) for k, a in zip(keys, alone_keys))
        decoder = BatchDecoder(gpt)
        decoder.join(*batch)
        assert len(decoder) == len(texts)
        while decoder.rows:
            decoder.step()
    assert [r.codes for r in batch] == solo


def _loop_codes(golden, texts, monkeypatch=None):
    """The decode loop given ``texts`` all at once (they arrive before its thread takes any): their codes."""
    from xtts_ft.serve.decode_loop import DecodeLoop

    loop = DecodeLoop(golden[0].gpt, max_active=8)
    requests = [_request(golden, t, i) for i, t in enumerate(texts)]
    try:
        with loop._cond:  # the thread starts at the first submit and waits for this to be released
            streams = [loop.submit(r) for r in requests]
        for stream in streams:
            while not stream.finished:
                stream.wait(stream.produced, timeout=5.0)
    finally:
        loop.close()
    return [r.codes for r in requests], loop


def test_the_decode_loop_prefills_arrivals_together_with_their_solo_codes(golden):
    texts = ["hi", "a much longer sentence than the others here", "peter piper"]
    codes, loop = _loop_codes(golden, texts)
    assert loop.largest_join == 3
    assert codes == [_solo(golden, t, i) for i, t in enumerate(texts)]


def test_a_failed_prefill_together_is_tried_again_one_by_one(golden, monkeypatch, caplog):
    import xtts_ft.inference.batch_decode as batch_decode

    real = batch_decode.prefill_forward

    def fails_together(gpt, rows):
        if len(rows) > 1:
            raise RuntimeError("CUDA out of memory (injected)")
        return real(gpt, rows)

    monkeypatch.setattr(batch_decode, "prefill_forward", fails_together)
    texts = ["hi", "peter piper", "zebra"]
    codes, loop = _loop_codes(golden, texts)
    monkeypatch.undo()
    assert codes == [_solo(golden, t, i) for i, t in enumerate(texts)]
    assert "prefill of 3 requests together failed" in caplog.text and "3 tried again one by one" in caplog.text


def test_draw_is_multinomial_row_by_row_bit_for_bit_and_moves_each_generator_alike():
    from xtts_ft.inference.batch_decode import draw

    sampling = Sampling()
    for rows in (1, 5):
        logits = torch.randn(rows, 300, generator=torch.Generator().manual_seed(rows)) * 4
        probs = torch.softmax(sampling.warp(logits), dim=-1)
        ours = [torch.Generator().manual_seed(10 + i) for i in range(rows)]
        theirs = [torch.Generator().manual_seed(10 + i) for i in range(rows)]
        for _ in range(40):
            expected = torch.cat([torch.multinomial(probs[i:i + 1], 1, generator=g)[0] for i, g in enumerate(theirs)])
            assert torch.equal(draw(probs, ours), expected)
        assert all(torch.equal(a.get_state(), b.get_state()) for a, b in zip(ours, theirs))


def test_logits_that_are_not_finite_are_refused_not_turned_into_codes(golden):
    """``torch.multinomial`` refused NaN probabilities row by row; the decoder checks all rows' logits at once."""
    requests = [_request(golden, "hi", 0), _request(golden, "peter piper", 1)]
    decoder = BatchDecoder(golden[0].gpt)
    with torch.inference_mode():
        decoder.join(*requests)
        hidden = torch.zeros(2, golden[0].gpt.gpt.config.n_embd)
        hidden[1, 0] = float("nan")
        with pytest.raises(RuntimeError, match="logits are not finite .* for 1 of 2 requests"):
            decoder._accept(decoder.rows, decoder._seen, hidden)


def test_a_bf16_decoder_runs_a_cast_copy_of_the_blocks_and_leaves_the_models_own_alone(golden):
    """decode_precision bf16: the GPT-2 blocks' weights cast once into a copy (the model's stay fp32: evaluation shares
    it with training); the latents and logits still come out of the fp32 final norm and head. The CPU runs bf16
    matrix products too (slowly), so the path runs here, eager and through the fixed shapes a CUDA graph replays."""
    from tests.inference.test_decode_graph import GREEDY
    from xtts_ft.inference.batch_decode import decode_transformer, prefill, prefill_forward, prefill_rows
    from xtts_ft.inference.decode_graph import FixedShapeStep, call_directly
    from xtts_ft.inference.prefill_graph import FixedShapePrefill

    gpt = golden[0].gpt
    before = [p.clone() for p in gpt.gpt.parameters()]
    blocks = decode_transformer(gpt, torch.bfloat16)
    assert decode_transformer(gpt, None) is gpt.gpt and decode_transformer(gpt, torch.float32) is gpt.gpt
    assert blocks is not gpt.gpt and {p.dtype for p in blocks.parameters()} == {torch.bfloat16}
    assert all(p.dtype == torch.float32 and torch.equal(p, b) for p, b in zip(gpt.gpt.parameters(), before))
    texts = ["hi", "peter piper picked", "the quick brown fox jumps"]
    prefixes = [_request(golden, t, 0).prefix for t in texts]
    with torch.inference_mode():  # the first hidden states: bf16's rounding, no more
        full, half = prefill(gpt, prefixes), prefill_forward(blocks, [r.to(torch.bfloat16) for r in prefill_rows(gpt, prefixes)])
    assert half[0].dtype == torch.bfloat16 and half[3] == full[3]
    assert float((half[0].float() - full[0]).abs().max()) <= 3e-2 * float(full[0].abs().max())
    decoded = {}
    for graphs in (False, True):
        rows = [_request(golden, t, i, sampling=GREEDY, max_codes=30) for i, t in enumerate(texts)]
        decoder = BatchDecoder(gpt, DecoderParts(
            transformer=blocks, max_rows=4 if graphs else None,
            step=FixedShapeStep(record=call_directly) if graphs else None,
            prefill=FixedShapePrefill(prefill_forward, record=call_directly) if graphs else None))
        with torch.inference_mode():
            decoder.join(*rows[:2])
            assert decoder._cache.keys[0].dtype == torch.bfloat16
            decoder.step()
            decoder.join(rows[2])
            while decoder.rows:
                decoder.step()
        for row in rows:
            latents = torch.stack(row.latents)
            assert row.codes and latents.dtype == torch.float32 and bool(torch.isfinite(latents).all())
        if graphs:
            assert decoder.parts.step.disabled is None and decoder.parts.prefill.disabled is None
            assert decoder.parts.step.recordings >= 1 and decoder.parts.prefill.recordings >= 1
        decoded[graphs] = [r.codes[0] for r in rows]
    assert decoded[True] == decoded[False]
