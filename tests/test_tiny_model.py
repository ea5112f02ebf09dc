"""The tiny random model is a real XTTS in the XTTS-v2 file layout that stock coqui loads."""

from __future__ import annotations

import json

import torch

from xtts_ft.base_model import REQUIRED_FILES


def test_layout_and_weights_only_loading(tiny_base_dir):
    for name in REQUIRED_FILES:
        assert (tiny_base_dir / name).is_file(), name
    for name in ("model.pth", "dvae.pth", "mel_stats.pth"):
        torch.load(tiny_base_dir / name, weights_only=True)  # no pickled code anywhere
    state = torch.load(tiny_base_dir / "model.pth", weights_only=True)["model"]
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
