"""Shared fixtures: a vocab that knows [am], a voice, and a briefly trained model (tiny model: tests/fixtures).

The Amharic normaliser and the extended-vocab builder live elsewhere; here the tiny base vocab
plus an ``[am]`` special token is enough, and "Amharic" requests use Latin-letter text with an
identity normaliser. Synthesis with a random model runs to the token limit, so every test caps
generation with a small ``max_new_tokens``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import soundfile as sf
import torch

from tests.evaluate.evalhelpers import SR, identity, train_steps, voice_like


@pytest.fixture(scope="session")
def am_vocab(tiny_base, tmp_path_factory) -> Path:
    """The tiny base vocab with [am] appended as a special token (what the extended vocab adds, minimally)."""
    from tokenizers import Tokenizer

    out = tmp_path_factory.mktemp("vocab") / "vocab.json"
    tok = Tokenizer.from_file(str(tiny_base.vocab_json))
    tok.add_special_tokens(["[am]"])
    tok.save(str(out))
    return out


@pytest.fixture(scope="session")
def tokenizer(am_vocab):
    from xtts_ft.tokenizer.voice_tokenizer import AmharicTokenizer

    return AmharicTokenizer(str(am_vocab), normalizer=identity, char_limit=200, fold_homophones=False)


@pytest.fixture(scope="session")
def speaker_wav(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("voice") / "voice_a.wav"
    sf.write(str(path), voice_like(3.0), SR)
    return path


@pytest.fixture(scope="session")
def trained(tiny_base, am_vocab, tokenizer):
    """An XttsTrainingModel after two optimizer steps (its GPT differs from the base)."""
    from xtts_ft.model import build_training_model

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = build_training_model(tiny_base, am_vocab, tokenizer)
        train_steps(model, tokenizer)
    return model


@pytest.fixture(scope="session")
def trained_gpt_state(trained) -> dict:
    return {k: v.detach().clone() for k, v in trained.xtts.gpt.state_dict().items()}
