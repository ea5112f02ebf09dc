"""A tiny random CTC recogniser in the Hugging Face file layout (written once per session)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_ctc_dir(tmp_path_factory) -> Path:
    from transformers import (
        SeamlessM4TFeatureExtractor,
        Wav2Vec2BertConfig,
        Wav2Vec2BertForCTC,
        Wav2Vec2BertProcessor,
        Wav2Vec2CTCTokenizer,
    )

    out = tmp_path_factory.mktemp("tiny_ctc")
    vocab = {"<pad>": 0, "<unk>": 1, "|": 2, "ሰ": 3, "ላ": 4, "ም": 5}
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    tokenizer = Wav2Vec2CTCTokenizer(str(out / "vocab.json"), word_delimiter_token="|")
    processor = Wav2Vec2BertProcessor(feature_extractor=SeamlessM4TFeatureExtractor(), tokenizer=tokenizer)
    config = Wav2Vec2BertConfig(
        vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
        output_hidden_size=16, conv_depthwise_kernel_size=3, pad_token_id=0,
    )
    Wav2Vec2BertForCTC(config).save_pretrained(out)
    processor.save_pretrained(out)
    return out
