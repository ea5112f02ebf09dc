"""Streamed vocoding: the same audio as the whole utterance, no clicks at the joins, work linear in the audio."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from xtts_ft.inference.streaming_vocoder import CROSSFADE_FRAMES, StreamingVocoder
from xtts_ft.inference.streaming_vocoder_reference import ReferenceStreamingVocoder


def _latents(n: int, dim: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.cumsum(torch.randn(n, dim, generator=gen) * 0.3, dim=0)  # smooth, like a GPT's latents


def _stream(hifigan, latents, g, sizes) -> tuple[list[np.ndarray], StreamingVocoder]:
    vocoder = StreamingVocoder(hifigan, g)
    chunks, given = [], 0
    for size in sizes:
        vocoder.add(list(latents[given : given + size]))
        given += size
        chunks.append(vocoder.audio(final=given >= len(latents)))
    return chunks, vocoder


@pytest.mark.parametrize("rates,dtype", [((24000, 22050), torch.float32), ((22050, 22050), torch.float32),
                                         ((24000, 22050), torch.bfloat16)])
def test_frames_are_the_first_versions_bit_for_bit(rates, dtype):
    """Index tables built on the host over the window's latents only give the first version's frames (every latent
    stacked, the indices on the latents' device, ``torch.unique``) exactly, at every chunk of a 400-code utterance."""
    shape = SimpleNamespace(output_hop_length=256, ar_mel_length_compression=1024, output_sample_rate=rates[0],
                            input_sample_rate=rates[1])  # XTTS-v2's HiFiGAN (and one without resampling)
    latents = _latents(400, 64).to(dtype)
    g = torch.zeros(1, 8, 1)
    fast, first = StreamingVocoder(shape, g), ReferenceStreamingVocoder(shape, g)
    given, windows = 0, 0
    for size in [10] + [40] * 10:
        chunk = list(latents[given : given + size])
        given += size
        final = given >= len(latents)
        fast.add(chunk)
        first.add(chunk)
        a, b = fast.plan(final), first.plan(final)
        assert isinstance(a, np.ndarray) == isinstance(b, np.ndarray)
        if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
            assert np.array_equal(a, b)
            continue
        assert a.frames.dtype == dtype and torch.equal(a.frames, b.frames), f"window {windows}"
        assert (a.keep_from, a.keep_to, a.final) == (b.keep_from, b.keep_to, b.final)
        wav = torch.randn(a.frames.shape[-1] * 256, generator=torch.Generator().manual_seed(windows))  # its stand-in audio
        assert np.array_equal(fast.finish(a, wav), first.finish(b, wav))
        windows += 1
        if final:
            break
    assert windows == 11 and fast.frames_vocoded == first.frames_vocoded


@pytest.mark.parametrize("n", [61, 7])  # several chunks; an utterance shorter than the first chunk
def test_streamed_audio_is_the_whole_vocoding(engine, n):
    hifigan = engine.xtts.hifigan_decoder
    latents = _latents(n, engine.xtts.gpt.model_dim)
    g = torch.randn(1, 512, 1, generator=torch.Generator().manual_seed(1))
    sizes = [10] + [17] * 10  # a small first chunk, then larger ones (more than needed: the rest are empty)
    with torch.inference_mode():
        whole = hifigan(latents[None], g=g).reshape(-1).numpy()
        chunks, vocoder = _stream(hifigan, latents, g, sizes)
    streamed = np.concatenate(chunks)
    assert streamed.dtype == np.float32 and streamed.size == whole.size
    joins = np.cumsum([c.size for c in chunks if c.size])[:-1]
    near = np.zeros(whole.size, dtype=bool)
    xf = CROSSFADE_FRAMES * vocoder.hop
    for j in joins:
        near[max(0, j - 8) : j + xf + 8] = True
    error = np.abs(streamed - whole)
    scale = np.abs(whole).max()
    assert error[~near].max() <= 1e-4 * scale, "away from the joins: the whole-utterance audio"
    if joins.size:
        assert error[near].max() <= 1e-3 * scale, "at the joins: a blend of two versions of the same samples"
        jumps = np.abs(np.diff(streamed))
        at_joins = max(jumps[max(0, j - 2) : j + xf + 2].max() for j in joins)
        assert at_joins <= jumps.max() and at_joins <= np.abs(np.diff(whole)).max() * (1 + 1e-3), "no clicks"


def test_first_chunk_comes_from_the_first_codes_alone(engine):
    hifigan = engine.xtts.hifigan_decoder
    latents = _latents(10, engine.xtts.gpt.model_dim)
    g = torch.zeros(1, 512, 1)
    with torch.inference_mode():
        vocoder = StreamingVocoder(hifigan, g)
        vocoder.add(list(latents))
        first = vocoder.audio()
    assert first.size > 0.15 * 24000, "10 codes (~0.46 s) give audio at once (0.2-0.3 s of it)"


class _CountingGenerator:
    """The engine's HiFiGAN sizes (hop, compression, sample rates) with a waveform generator that counts the frames
    it is given and returns silence of their length: the work is measured, not done (the real generator's audio
    is checked above; vocoding 18 s of speech with it took 13-56 s of the suite's time)."""

    def __init__(self, hifigan: torch.nn.Module) -> None:
        for name in ("output_hop_length", "ar_mel_length_compression", "output_sample_rate", "input_sample_rate"):
            setattr(self, name, getattr(hifigan, name))
        self.frames_given = 0

    def waveform_decoder(self, z: torch.Tensor, g: torch.Tensor | None = None) -> torch.Tensor:
        self.frames_given += z.shape[-1]
        return torch.zeros(1, 1, z.shape[-1] * int(self.output_hop_length))


def test_vocoder_work_is_linear_in_the_audio(engine):
    """coqui's inference_stream re-vocodes everything so far at every chunk; here each frame about once."""
    hifigan = _CountingGenerator(engine.xtts.hifigan_decoder)
    n = 400  # ~18 s of speech
    latents = _latents(n, engine.xtts.gpt.model_dim)
    sizes = [10] + [20] * 20
    with torch.inference_mode():
        chunks, vocoder = _stream(hifigan, latents, torch.zeros(1, 512, 1), sizes)
    total_frames = int(np.floor(np.floor(n * 4) * 24000 / 22050))
    assert sum(c.size for c in chunks) == total_frames * vocoder.hop  # the whole utterance came out
    assert hifigan.frames_given == vocoder.frames_vocoded  # the vocoder's own count is the generator's work
    overhead = vocoder.windows * (vocoder.context + vocoder.lookahead + 2 * CROSSFADE_FRAMES)
    assert vocoder.frames_vocoded <= total_frames + overhead
    quadratic = sum(min(n, 10 + 20 * i) for i in range(len(sizes))) * total_frames / n  # coqui: all so far, each time
    assert vocoder.frames_vocoded < 0.25 * quadratic


def test_windows_of_several_streams_vocoded_in_one_call_give_each_its_own_audio(engine):
    """Streams at different points (so windows of different lengths, right-padded in the shared call) and with
    different voices: each stream's chunks are what it gets vocoding alone, up to float rounding."""
    from xtts_ft.inference.streaming_vocoder import vocode_windows, windows_fit

    hifigan = engine.xtts.hifigan_decoder
    dim = engine.xtts.gpt.model_dim
    plans = [(_latents(sum(sizes), dim, seed=s), torch.randn(1, 512, 1, generator=torch.Generator().manual_seed(10 + s)),
              sizes) for s, sizes in enumerate([[10, 6, 6], [13, 7], [10, 9]])]
    with torch.inference_mode():
        alone = [np.concatenate(_stream(hifigan, latents, g, sizes)[0]) for latents, g, sizes in plans]
        vocoders = [StreamingVocoder(hifigan, g) for _latents_, g, _sizes in plans]
        given = [0, 0, 0]
        together: list[list[np.ndarray]] = [[], [], []]
        shared_lengths = []
        for step in range(3):
            windows = {}
            for i, (latents, _g, sizes) in enumerate(plans):
                if step < len(sizes):
                    vocoders[i].add(list(latents[given[i]:given[i] + sizes[step]]))
                    given[i] += sizes[step]
                    windows[i] = vocoders[i].plan(final=given[i] >= len(latents))
            ready = {i: w for i, w in windows.items() if not isinstance(w, np.ndarray)}
            for i, w in windows.items():
                if isinstance(w, np.ndarray):
                    together[i].append(w)
            groups: list[list[int]] = []
            for i in ready:  # the way the vocoder's turns gather them: into the first group whose leader it fits
                home = next((g for g in groups if windows_fit(ready[g[0]], ready[i])), None)
                (home.append(i) if home is not None else groups.append([i]))
            for group in groups:
                shared_lengths.append(sorted({ready[i].frames.shape[-1] for i in group}))
                for i, wav in zip(group, vocode_windows(hifigan, [ready[i] for i in group])):
                    together[i].append(vocoders[i].finish(ready[i], wav))
    assert any(len(lengths) > 1 for lengths in shared_lengths), "windows of different lengths shared a call"
    for mine, theirs in zip(together, alone):
        got = np.concatenate(mine)
        assert got.size == theirs.size
        assert np.abs(got - theirs).max() <= 1e-5 * np.abs(theirs).max()


def test_a_final_window_shares_a_call_only_with_windows_of_its_length():
    from xtts_ft.inference.streaming_vocoder import Window, windows_fit

    def window(frames: int, final: bool) -> Window:
        return Window(torch.zeros(8, frames), torch.zeros(1, 4, 1), final, 0, frames)

    assert windows_fit(window(30, False), window(50, False))
    assert not windows_fit(window(30, True), window(50, False)) and not windows_fit(window(30, False), window(50, True))
    assert windows_fit(window(30, True), window(30, False)) and windows_fit(window(30, True), window(30, True))


def test_folding_hifigans_weight_norm_changes_no_sample(engine):
    """The engine folds HiFiGAN's weight norm into plain weights once; a fresh generator's audio is bit for bit the
    same before and after, and folding again does nothing."""
    from torch.nn.utils import parametrize
    from TTS.tts.layers.xtts.hifigan_decoder import HifiDecoder

    from xtts_ft.inference.streaming_vocoder import fold_weight_norm

    assert not any(parametrize.is_parametrized(m) for m in engine.xtts.hifigan_decoder.waveform_decoder.modules())
    torch.manual_seed(0)
    hifigan = HifiDecoder().eval()
    z, g = _latents(12, 1024).T[None], torch.randn(1, 512, 1)
    with torch.inference_mode():
        before = hifigan.waveform_decoder(z, g=g)
    assert fold_weight_norm(hifigan) > 50
    with torch.inference_mode():
        after = hifigan.waveform_decoder(z, g=g)
    assert torch.equal(before, after) and fold_weight_norm(hifigan) == 0
