"""Write a randomly initialised XTTS in the coqui/XTTS-v2 file layout, tiny or at the real size.

``tiny`` (``xtts_ft.tiny_model``) is what the demo and the tests train in seconds. ``full`` has the
real XTTS-v2 dimensions: GPT 30 layers x 1024 channels, 16 heads, perceiver resampler, 6681 text
ids, 1026 audio codes (start 1024, stop 1025), 605 audio and 402 text tokens at most, the HiFiGAN
decoder and speaker encoder, and a DVAE with real (random) weights in ``dvae.pth``. Its vocab.json
is the project's own full-size base vocabulary in the real format
(:mod:`xtts_ft.tokenizer.base_vocab`). It cannot speak; it exists so the memory, disk and time of a
real run can be measured on any machine (``benchmarks/full_size_rehearsal.py``) without the
licensed weights. Writing it takes about 2.1 GB of disk and 3 GB of memory (measured: 2.08 GB, 2.8 GB).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch

log = logging.getLogger(__name__)

SIZES = ("tiny", "full")

# The model_args of coqui/XTTS-v2's config.json (the text-token fields are filled from vocab.json).
FULL_GPT_ARGS = dict(
    gpt_layers=30,
    gpt_n_model_channels=1024,
    gpt_n_heads=16,
    decoder_input_dim=1024,
    d_vector_dim=512,
    gpt_num_audio_tokens=1026,
    gpt_start_audio_token=1024,
    gpt_stop_audio_token=1025,
    gpt_max_audio_tokens=605,
    gpt_max_text_tokens=402,
    gpt_max_prompt_tokens=70,
    gpt_code_stride_len=1024,
    gpt_use_perceiver_resampler=True,
    gpt_use_masking_gt_prompt_approach=True,
    num_chars=255,
    input_sample_rate=22050,
    output_sample_rate=24000,
    output_hop_length=256,
    cond_d_vector_in_each_upsampling_layer=True,
    duration_const=102400,
)


def full_xtts_config():
    from TTS.tts.configs.xtts_config import XttsArgs, XttsConfig

    from xtts_ft.tokenizer.base_vocab import BASE_LANGUAGES

    cfg = XttsConfig(model_args=XttsArgs(**FULL_GPT_ARGS), languages=list(BASE_LANGUAGES))
    cfg.model_args.tokenizer_file = ""  # coqui finds vocab.json beside model.pth
    return cfg


def write_full_model(out_dir: str | Path, seed: int = 0) -> Path:
    """config.json, model.pth, vocab.json, dvae.pth (real random DVAE weights), mel_stats.pth."""
    from TTS.tts.layers.xtts.tokenizer import VoiceBpeTokenizer
    from TTS.tts.models.xtts import Xtts

    from xtts_ft.model import new_dvae
    from xtts_ft.tokenizer.base_vocab import build_base_vocab

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    build_base_vocab(out / "vocab.json", seed=seed)
    cfg = full_xtts_config()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Xtts(cfg)
        model.tokenizer = VoiceBpeTokenizer(str(out / "vocab.json"))
        model.init_models()  # sizes the text embedding from the vocab (6681) and fills the token ids in args
        mel_stats = torch.ones(80)
        model.mel_stats.copy_(mel_stats)
        torch.save({"model": model.state_dict()}, out / "model.pth")
        del model  # the DVAE is built after the GPT is freed: peak memory stays at one model
        torch.save(new_dvae(cfg.model_args.gpt_num_audio_tokens).state_dict(), out / "dvae.pth")
    torch.save(mel_stats, out / "mel_stats.pth")
    (out / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2), encoding="utf-8")
    log.debug("full-size random XTTS written to %s", out)
    return out


def write_random_model(out_dir: str | Path, size: str = "tiny", seed: int = 0) -> Path:
    if size == "tiny":
        from xtts_ft.tiny_model import write_tiny_model

        return write_tiny_model(out_dir, seed=seed)
    if size == "full":
        return write_full_model(out_dir, seed=seed)
    raise ValueError(f"size must be one of {SIZES}, not {size!r}")
