"""Write a randomly initialised XTTS in the coqui/XTTS-v2 file layout, tiny or at the real size.

Both sizes are a real ``Xtts`` (GPT + HiFiGAN decoder + speaker encoder), only untrained; the
files are those of :mod:`xtts_ft.model_folder`, so any reader of a base model reads them.

* ``tiny`` is what the demo and the tests train in seconds on a laptop CPU: a 2-layer, 64-channel
  GPT, a 258-code audio vocabulary and a small English-ish BPE vocab. Its ``dvae.pth`` is an
  empty state dict: the project builds the DVAE from a fixed seed when its weights file is empty
  (see ``xtts_ft.model``), which keeps the folder at a few tens of MB instead of 200 MB.
* ``full`` has the real XTTS-v2 dimensions: GPT 30 layers x 1024 channels, 16 heads, perceiver
  resampler, 6681 text ids, 1026 audio codes (start 1024, stop 1025), 605 audio and 402 text tokens
  at most, and a DVAE with real (random) weights. Its vocab.json is the project's own full-size base
  vocabulary in the real format (:mod:`xtts_ft.tokenizer.base_vocab`). It cannot speak; it exists so
  the memory, disk and time of a real run can be measured on any machine
  (``benchmarks/full_size_rehearsal.py``) without the licensed weights. Writing it takes about 2.1 GB
  of disk and 3 GB of memory (measured: 2.08 GB, 2.8 GB).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Mapping, Optional, Sequence

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from TTS.tts.configs.xtts_config import XttsArgs, XttsConfig
from TTS.tts.layers.xtts.tokenizer import VoiceBpeTokenizer
from TTS.tts.models.xtts import Xtts

from xtts_ft.audio_io import DATASET_RATE, OUTPUT_RATE
from xtts_ft.base_model import BaseModelFiles, Fetcher, resolve_base_model
from xtts_ft.config import BaseModelConfig
from xtts_ft.model import new_dvae
from xtts_ft.model_folder import ModelFolder
from xtts_ft.tokenizer.base_vocab import BASE_LANGUAGES, build_base_vocab

log = logging.getLogger(__name__)

SIZES = ("tiny", "full")

# English-ish base alphabet: the tiny base model "knows" English, like the real one knows 16 languages.
_TINY_TEXT = (
    "the quick brown fox jumps over the lazy dog. a tiny model speaks english, and only english! "
    "is this the real life? is this just fantasy? numbers: one, two, three; four - five. "
    "she sells sea shells by the sea shore. peter piper picked a peck of pickled peppers."
)
# Language tokens follow the real XTTS-v2 vocabulary: [START] sits between them, not last.
_TINY_SPECIAL_AFTER_MERGES = ["[en]", "[de]", "[START]", "[fr]", "[es]"]
TINY_LANGUAGES = ("en", "de", "fr", "es")

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
    input_sample_rate=DATASET_RATE,
    output_sample_rate=OUTPUT_RATE,
    output_hop_length=256,
    cond_d_vector_in_each_upsampling_layer=True,
    duration_const=102400,
)


def write_tiny_vocab(path: Path) -> None:
    """A BPE vocab.json shaped like XTTS's: [STOP]=0, [UNK]=1, [SPACE]=2, chars, merges, language tokens."""
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(
        vocab_size=160, special_tokens=["[STOP]", "[UNK]", "[SPACE]"], min_frequency=2, show_progress=False
    )
    tok.train_from_iterator([_TINY_TEXT] * 4, trainer=trainer)
    tok.add_special_tokens(_TINY_SPECIAL_AFTER_MERGES)
    tok.save(str(path))


def _xtts_config(gpt_args: Mapping[str, int], languages: Sequence[str]) -> XttsConfig:
    cfg = XttsConfig(model_args=XttsArgs(**gpt_args), languages=list(languages))
    cfg.model_args.tokenizer_file = ""  # coqui finds vocab.json beside model.pth
    return cfg


def tiny_xtts_config() -> XttsConfig:
    return _xtts_config(TINY_GPT_ARGS, TINY_LANGUAGES)


def full_xtts_config() -> XttsConfig:
    return _xtts_config(FULL_GPT_ARGS, BASE_LANGUAGES)


def write_random_model(out_dir: str | Path, size: str = "tiny", seed: int = 0) -> Path:
    """Write config.json, model.pth, vocab.json, dvae.pth, mel_stats.pth of a random XTTS of ``size`` into ``out_dir``."""
    if size not in SIZES:
        raise ValueError(f"size must be one of {SIZES}, not {size!r}")
    folder = ModelFolder(out_dir)
    folder.root.mkdir(parents=True, exist_ok=True)
    if size == "tiny":
        write_tiny_vocab(folder.vocab)
        cfg = tiny_xtts_config()
    else:
        build_base_vocab(folder.vocab, seed=seed)
        cfg = full_xtts_config()
    mel_stats = torch.ones(80)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Xtts(cfg)
        model.tokenizer = VoiceBpeTokenizer(str(folder.vocab))
        model.init_models()  # sizes the text embedding from the vocab and fills the token ids in args, as coqui's load
        model.mel_stats.copy_(mel_stats)
        torch.save({"model": model.state_dict()}, folder.model)
        del model  # a full DVAE is built after the GPT is freed: peak memory stays at one model
        # tiny: an empty DVAE file (xtts_ft.model builds it from a fixed seed); full: real random weights
        dvae = new_dvae(cfg.model_args.gpt_num_audio_tokens).state_dict() if size == "full" else {}
        torch.save(dvae, folder.dvae)
    torch.save(mel_stats, folder.mel_stats)
    folder.config_json.write_text(json.dumps(cfg.to_dict(), indent=2), encoding="utf-8")
    log.debug("%s random XTTS written to %s", size, folder.root)
    return folder.root


def write_tiny_model(out_dir: str | Path, seed: int = 0) -> Path:
    """``write_random_model(out_dir, "tiny", seed)``: the model the demo and every test trains."""
    return write_random_model(out_dir, "tiny", seed)


def resolve_or_create_base_model(cfg: BaseModelConfig, fetcher: Optional[Fetcher] = None) -> BaseModelFiles:
    """The base model's files; with ``base_model.create_tiny`` a missing folder is first written as a tiny model.

    The decision to create lives here, above :mod:`xtts_ft.base_model`, so that finding a base model never
    imports the code that builds one. An existing folder is never replaced.
    """
    root = Path(cfg.source).expanduser()
    if cfg.create_tiny and not root.exists():
        log.warning("writing a tiny RANDOM XTTS model to %s (base_model.create_tiny is set)", root)
        write_tiny_model(root)
    return resolve_base_model(cfg, fetcher)
