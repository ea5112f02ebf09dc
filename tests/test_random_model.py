"""Random models in the XTTS-v2 layout: the tiny one is a real XTTS that stock coqui loads; the full-size one's
config and vocabulary have the real XTTS-v2 shapes (no full model is built: the GPT is laid out on torch's meta
device, which allocates nothing)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from xtts_ft.model_folder import DVAE_FILE, MEL_STATS_FILE, MODEL_FILE, REQUIRED_FILES
from xtts_ft.random_model import FULL_GPT_ARGS, full_xtts_config
from xtts_ft.tokenizer.base_vocab import ADDED_IN_MIDDLE, BASE_LANGUAGES, build_base_vocab
from xtts_ft.tokenizer.vocab_file import id_mismatches, read_vocab

REPO = Path(__file__).resolve().parents[1]
FULL_VOCAB = REPO / "tests" / "assets" / "xtts_format_vocab.json"


def test_full_config_has_the_xtts_v2_dimensions():
    args = full_xtts_config().model_args
    assert (args.gpt_layers, args.gpt_n_model_channels, args.gpt_n_heads) == (30, 1024, 16)
    assert (args.gpt_num_audio_tokens, args.gpt_start_audio_token, args.gpt_stop_audio_token) == (1026, 1024, 1025)
    assert (args.gpt_max_audio_tokens, args.gpt_max_text_tokens, args.gpt_max_prompt_tokens) == (605, 402, 70)
    assert args.gpt_use_perceiver_resampler and args.decoder_input_dim == 1024 and args.d_vector_dim == 512
    assert set(full_xtts_config().languages) == set(BASE_LANGUAGES) and "am" not in BASE_LANGUAGES


def test_full_vocab_has_the_real_xtts_format():
    table = read_vocab(FULL_VOCAB)
    ids = table.all_ids()
    assert table.num_rows == 6681 == len(ids)  # gpt_number_text_tokens of XTTS-v2, no gaps
    assert (ids["[STOP]"], ids["[UNK]"], ids["[SPACE]"]) == (0, 1, 2)
    assert ids["[START]"] == 261  # coqui GPT's default start_text_token, in the middle of the range
    assert max(ids[t] for t in ADDED_IN_MIDDLE) < table.num_rows - 1000
    assert all(f"[{lang}]" in ids for lang in BASE_LANGUAGES) and "[am]" not in ids
    assert len(table.merges) > 5000 and not id_mismatches(table)  # ids load as written
    assert all(entry["special"] for entry in table.added_tokens)


def test_stock_coqui_tokenizer_reads_it_like_xtts():
    from TTS.tts.layers.xtts.tokenizer import VoiceBpeTokenizer

    tok = VoiceBpeTokenizer(str(FULL_VOCAB))
    assert tok.get_number_tokens() == 6681 and tok.tokenizer.token_to_id("[START]") == 261
    ids = tok.encode("one thousand two hundred, the quick brown fox.", "en")
    assert 1 not in ids and ids[0] == tok.tokenizer.token_to_id("[en]")
    assert len(ids) < len("one thousand two hundred, the quick brown fox.") / 2  # merges make multi-char tokens
    assert 1 not in tok.encode("привет, как дела?", "ru") and 1 not in tok.encode("größer als üblich", "de")


def test_full_gpt_shapes_from_config_and_vocab():
    from TTS.tts.layers.xtts.gpt import GPT

    a = full_xtts_config().model_args
    with torch.device("meta"):
        gpt = GPT(layers=a.gpt_layers, model_dim=a.gpt_n_model_channels, start_text_token=261, stop_text_token=0,
                  heads=a.gpt_n_heads, max_text_tokens=a.gpt_max_text_tokens, max_mel_tokens=a.gpt_max_audio_tokens,
                  max_prompt_tokens=a.gpt_max_prompt_tokens, number_text_tokens=read_vocab(FULL_VOCAB).num_rows,
                  num_audio_tokens=a.gpt_num_audio_tokens, start_audio_token=a.gpt_start_audio_token,
                  stop_audio_token=a.gpt_stop_audio_token, use_perceiver_resampler=a.gpt_use_perceiver_resampler,
                  code_stride_len=a.gpt_code_stride_len)
    assert tuple(gpt.text_embedding.weight.shape) == (6681, 1024)
    assert tuple(gpt.mel_embedding.weight.shape) == (1026, 1024) and tuple(gpt.mel_head.weight.shape) == (1026, 1024)
    assert len(gpt.gpt.h) == 30 and hasattr(gpt, "conditioning_perceiver")
    params = sum(p.numel() for p in gpt.parameters())
    assert 400e6 < params < 500e6, params  # XTTS-v2's GPT is about 440 M parameters


def test_committed_vocab_is_what_the_builder_writes(tmp_path):
    """tests/assets/xtts_format_vocab.json is made by utils/make_test_vocab.py, not edited by hand."""
    fresh = build_base_vocab(tmp_path / "vocab.json")
    assert json.loads(fresh.read_text(encoding="utf-8")) == json.loads(FULL_VOCAB.read_text(encoding="utf-8")), (
        "rerun python utils/make_test_vocab.py")


def test_unknown_size_is_refused(tmp_path):
    from xtts_ft.random_model import write_random_model

    with pytest.raises(ValueError, match="tiny"):
        write_random_model(tmp_path, size="huge")
    assert FULL_GPT_ARGS["gpt_layers"] == 30


def test_layout_and_weights_only_loading(tiny_base_dir):
    for name in REQUIRED_FILES:
        assert (tiny_base_dir / name).is_file(), name
    for name in (MODEL_FILE, DVAE_FILE, MEL_STATS_FILE):
        torch.load(tiny_base_dir / name, weights_only=True)  # no pickled code anywhere
    state = torch.load(tiny_base_dir / MODEL_FILE, weights_only=True)["model"]
    assert any(k.startswith("gpt.") for k in state) and any(k.startswith("hifigan_decoder.") for k in state)


def test_vocab_has_the_xtts_shape(tiny_base_dir):
    vocab = json.loads((tiny_base_dir / "vocab.json").read_text(encoding="utf-8"))
    added = {t["content"]: t["id"] for t in vocab["added_tokens"]}
    assert (added["[STOP]"], added["[UNK]"], added["[SPACE]"]) == (0, 1, 2)
    assert vocab["model"]["merges"], "a BPE with merges, like the real vocab"
    # As in the real XTTS-v2 vocab, [START] is not the last id (coqui's resize assumes it is).
    assert added["[START]"] < max(added.values())
    assert "[am]" not in added  # the base model knows no Amharic; the tokenizer stage adds it


def test_stock_coqui_loads_it(tiny_base_dir):
    from TTS.tts.configs.xtts_config import XttsConfig
    from TTS.tts.models.xtts import Xtts

    config = XttsConfig()
    config.load_json(str(tiny_base_dir / "config.json"))
    model = Xtts(config)
    model.load_checkpoint(config, checkpoint_dir=str(tiny_base_dir), eval=True)
    ids = model.tokenizer.encode("the quick brown fox", "en")
    assert 1 not in ids  # no [UNK]
    assert model.gpt.text_embedding.weight.shape[0] == model.tokenizer.get_number_tokens()
