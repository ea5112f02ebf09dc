"""Write a tiny, randomly initialised XTTS in exactly the coqui/XTTS-v2 file layout.

The demo and the tests use it so the whole pipeline runs on a laptop CPU in minutes with no
download. It is a real ``Xtts`` (GPT + HiFiGAN decoder + speaker encoder) with a 2-layer,
64-channel GPT and a 258-code audio vocabulary; nothing about it is faked, it is only small
and untrained. ``dvae.pth`` is an empty state dict: the project builds the DVAE from a
fixed seed when its weights file is empty (see ``xtts_ft.model``), which keeps the folder
at a few tens of MB instead of the 200 MB a DVAE would take.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch

log = logging.getLogger(__name__)

# English-ish base alphabet: the tiny base model "knows" English, like the real one knows 16 languages.
_BASE_TEXT = (
    "the quick brown fox jumps over the lazy dog. a tiny model speaks english, and only english! "
    "is this the real life? is this just fantasy? numbers: one, two, three; four - five. "
    "she sells sea shells by the sea shore. peter piper picked a peck of pickled peppers."
)
# Language tokens follow the real XTTS-v2 vocabulary: [START] sits between them, not last.
_SPECIAL_AFTER_MERGES = ["[en]", "[de]", "[START]", "[fr]", "[es]"]

TINY_GPT_ARGS = dict(
    gpt_layers=2,
    gpt_n_model_channels=64,
    gpt_n_heads=4,
    decoder_input_dim=64,
    d_vector_dim=512,  # hard-coded in the speaker encoder
    gpt_num_audio_tokens=258,
    gpt_start_audio_token=256,
    gpt_stop_audio_token=257,
    gpt_max_audio_tokens=260,  # ~12 s of audio at a code stride of 1024 samples
    gpt_max_text_tokens=200,
    gpt_max_prompt_tokens=70,
    gpt_code_stride_len=1024,
    gpt_use_perceiver_resampler=True,  # as in XTTS-v2
    gpt_use_masking_gt_prompt_approach=True,
)


def write_tiny_vocab(path: Path) -> None:
    """A BPE vocab.json shaped like XTTS's: [STOP]=0, [UNK]=1, [SPACE]=2, chars, merges, language tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(
        vocab_size=160, special_tokens=["[STOP]", "[UNK]", "[SPACE]"], min_frequency=2, show_progress=False
    )
    tok.train_from_iterator([_BASE_TEXT] * 4, trainer=trainer)
    tok.add_special_tokens(_SPECIAL_AFTER_MERGES)
    tok.save(str(path))


def tiny_xtts_config(vocab_path: Path):
    from TTS.tts.configs.xtts_config import XttsArgs, XttsConfig

    args = XttsArgs(**TINY_GPT_ARGS)
    cfg = XttsConfig(model_args=args, languages=["en", "de", "fr", "es"])
    cfg.model_args.tokenizer_file = ""  # coqui finds vocab.json beside model.pth
    return cfg


def write_tiny_model(out_dir: str | Path, seed: int = 0) -> Path:
    """Write config.json, model.pth, vocab.json, dvae.pth, mel_stats.pth into ``out_dir``."""
    from TTS.tts.layers.xtts.tokenizer import VoiceBpeTokenizer
    from TTS.tts.models.xtts import Xtts

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_tiny_vocab(out / "vocab.json")
    cfg = tiny_xtts_config(out / "vocab.json")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Xtts(cfg)
        model.tokenizer = VoiceBpeTokenizer(str(out / "vocab.json"))
        model.init_models()  # sizes the GPT text embedding from the vocab, as coqui does on load
    mel_stats = torch.ones(80)
    model.mel_stats.copy_(mel_stats)
    torch.save({"model": model.state_dict()}, out / "model.pth")
    torch.save({}, out / "dvae.pth")
    torch.save(mel_stats, out / "mel_stats.pth")
    cfg_dict = cfg.to_dict()
    (out / "config.json").write_text(json.dumps(cfg_dict, indent=2), encoding="utf-8")
    log.debug("tiny random XTTS written to %s", out)
    return out
