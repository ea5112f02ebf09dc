import math
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from tests.evaluate.evalhelpers import MAX_NEW_TOKENS, identity
from xtts_ft.errors import DataError, TokenizerError
from xtts_ft.evaluate.synthesis import gpt_ready_for_inference, speaker_names, synthesize_samples
from xtts_ft.inference.conditioning import check_reference, conditioning


def _snapshot(model):
    return (
        set(model.state_dict()),
        {name: m.training for name, m in model.named_modules()},
        torch.random.get_rng_state(),
    )


def test_samples_are_written_measured_and_the_model_is_left_as_it_was(trained, tokenizer, speaker_wav, tmp_path):
    trained.train()
    keys, modes, rng = _snapshot(trained)
    results = synthesize_samples(
        trained.xtts, tokenizer, ["the quick fox"], [speaker_wav], tmp_path / "s",
        max_new_tokens=MAX_NEW_TOKENS, seconds_per_char_range=(0.01, 10.0), language="am", temperature=0.7,
    )
    assert len(results) == 1
    r = results[0]
    assert r.path == tmp_path / "s" / "voice_a_0.wav" and r.path.is_file()
    audio, sr = sf.read(str(r.path))
    assert sr == 24000 and audio.size > 0 and np.isfinite(audio).all()
    assert r.duration_s == pytest.approx(audio.size / sr)
    assert 1 <= r.n_codes <= MAX_NEW_TOKENS == r.max_codes
    if not r.ended_with_stop:  # a random model babbles: it ran into the limit
        assert r.n_codes == MAX_NEW_TOKENS
    assert r.seconds_per_char == pytest.approx(r.duration_s / len("the quick fox"))
    assert r.seconds_per_char_in_range is True
    assert 0.0 <= r.silence_ratio <= 1.0 and r.rtf > 0 and math.isfinite(r.rtf)
    # training can continue exactly as before: same keys (no inference copies), same modes, same RNG stream
    assert _snapshot(trained)[0] == keys and _snapshot(trained)[1] == modes
    assert torch.equal(torch.random.get_rng_state(), rng)
    assert "gpt_inference" not in trained.xtts.gpt._modules and "wte" not in trained.xtts.gpt.gpt._modules
    assert trained.xtts.gpt.max_gen_mel_tokens > MAX_NEW_TOKENS
    assert trained.xtts.gpt.training


def test_same_seed_same_audio(trained, tokenizer, speaker_wav, tmp_path):
    kw = dict(max_new_tokens=4, seed=3, language="am", temperature=0.7)
    a = synthesize_samples(trained.xtts, tokenizer, ["peter piper"], [speaker_wav], tmp_path / "a", **kw)[0]
    b = synthesize_samples(trained.xtts, tokenizer, ["peter piper"], [speaker_wav], tmp_path / "b", **kw)[0]
    assert np.array_equal(sf.read(str(a.path))[0], sf.read(str(b.path))[0])


def test_stop_token_is_detected(trained, tokenizer, speaker_wav, tmp_path):
    """Make the stop code overwhelmingly likely: generation ends at once, with the stop token."""
    bias = trained.xtts.gpt.mel_head.bias
    saved = bias.detach().clone()
    try:
        with torch.no_grad():
            bias[trained.xtts.gpt.stop_audio_token] = 1e4
        r = synthesize_samples(trained.xtts, tokenizer, ["the fox"], [speaker_wav], tmp_path, max_new_tokens=20,
                               language="am", temperature=0.7)[0]
    finally:
        with torch.no_grad():
            bias.copy_(saved)
    assert r.ended_with_stop and r.n_codes < 20


def test_inference_copies_of_a_loaded_model_are_kept(trained):
    gpt = trained.xtts.gpt
    gpt.init_gpt_for_inference(kv_cache=True)  # as stock load_checkpoint(eval=True) leaves it
    try:
        with gpt_ready_for_inference(trained.xtts, 5):
            assert gpt.max_gen_mel_tokens == 5
        assert "gpt_inference" in gpt._modules
    finally:
        del gpt.gpt_inference
        del gpt.gpt.wte


def test_language_without_token_is_a_user_error(tiny_base, trained, speaker_wav, tmp_path):
    from xtts_ft.tokenizer.voice_tokenizer import AmharicTokenizer

    # the base vocab: no [am]
    plain = AmharicTokenizer(str(tiny_base.vocab_json), normalizer=identity, char_limit=200, fold_homophones=False)
    with pytest.raises(TokenizerError, match=r"\[am\]"):
        synthesize_samples(trained.xtts, plain, ["x"], [speaker_wav], tmp_path, language="am", temperature=0.7)


def test_voice_latents_are_coquis_from_audio_read_without_torchaudio(trained, tmp_path, monkeypatch):
    """From torchaudio 2.9 on ``torchaudio.load`` (what coqui's ``get_conditioning_latents`` reads with) needs torchcodec
    and FFmpeg. The project reads the clip itself (soundfile) and runs coqui's steps on it: the same latents bit for
    bit, here where coqui's own method still runs, for a mono FLAC at the model's rate, a stereo 44.1 kHz WAV
    (channels averaged, resampled) and a float WAV past full scale (clipped), with and without coqui's level norm."""
    xtts, cfg = trained.xtts, trained.xtts.config
    rng = np.random.default_rng(0)
    stereo, loud = tmp_path / "stereo.wav", tmp_path / "loud.wav"
    sf.write(stereo, (0.3 * rng.standard_normal((2 * 44100, 2))).astype(np.float32), 44100, subtype="PCM_16")
    sf.write(loud, (1.5 * np.sin(np.arange(2 * 24000) / 7.0)).astype(np.float32), 24000, subtype="FLOAT")
    clips = [(Path(__file__).resolve().parents[2] / "datasets/amharic_demo/wavs/spk1_001.flac", False), (stereo, False),
             (loud, False), (stereo, True)]
    expected = []
    for wav, norm in clips:
        expected.append(xtts.get_conditioning_latents(str(wav), max_ref_length=cfg.max_ref_len, gpt_cond_len=cfg.gpt_cond_len,
                                                      gpt_cond_chunk_len=cfg.gpt_cond_chunk_len, sound_norm_refs=norm))

    def no_torchcodec(*args, **kwargs):
        raise ImportError("TorchCodec is required for load_with_torchcodec")  # torchaudio >= 2.9 without it

    import torchaudio

    monkeypatch.setattr(torchaudio, "load", no_torchcodec)
    for (wav, norm), theirs in zip(clips, expected):
        monkeypatch.setattr(cfg, "sound_norm_refs", norm)
        check_reference(wav)
        ours = conditioning(xtts, wav)
        assert all(torch.equal(a, b) for a, b in zip(ours, theirs)), wav.name


def test_missing_speaker_wav_is_a_user_error(trained, tokenizer, tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        synthesize_samples(trained.xtts, tokenizer, ["x"], [tmp_path / "nope.wav"], tmp_path, language="am", temperature=0.7)


def test_too_long_sentence_is_a_user_error(trained, tokenizer, speaker_wav, tmp_path):
    with pytest.raises(DataError, match="split it"):
        synthesize_samples(trained.xtts, tokenizer, ["the fox " * 200], [speaker_wav], tmp_path, language="am", temperature=0.7)
    assert "gpt_inference" not in trained.xtts.gpt._modules


def test_speaker_names_are_unique():
    assert speaker_names([Path("a/x.wav"), Path("b/x.wav"), Path("y.wav")]) == ["x", "x-2", "y"]
