"""resize_text_rows: old rows bit-identical, new rows shaped like trained ones; the first loss is not inflated."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from xtts_ft.tokenizer import AmharicTokenizer, build_extended_vocab, resize_text_rows

OLD, NEW, DIM = 1500, 4000, 32


def _trained_like_state(dtype=torch.float32) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(42)
    mean = torch.linspace(-0.3, 0.3, DIM)
    std = torch.linspace(0.02, 0.2, DIM)
    return {
        "gpt.text_embedding.weight": (mean + std * torch.randn(OLD, DIM, generator=g)).to(dtype),
        "gpt.text_head.weight": (0.5 * mean + std * torch.randn(OLD, DIM, generator=g)).to(dtype),
        "gpt.text_head.bias": (-2.0 + 0.5 * torch.randn(OLD, generator=g)).to(dtype),
        "gpt.mel_embedding.weight": torch.randn(OLD, DIM, generator=g),  # same row count, not a text key
        "gpt.final_norm.weight": torch.ones(DIM),
    }


def test_old_rows_are_bit_identical_and_the_input_is_untouched():
    state = _trained_like_state()
    before = {k: v.clone() for k, v in state.items()}
    grown = resize_text_rows(state, NEW)
    for key in ("gpt.text_embedding.weight", "gpt.text_head.weight", "gpt.text_head.bias"):
        assert grown[key].shape[0] == NEW
        assert torch.equal(grown[key][:OLD], before[key])
        assert torch.equal(state[key], before[key])  # the caller's dict and tensors are not modified
    assert grown["gpt.mel_embedding.weight"] is state["gpt.mel_embedding.weight"]
    assert grown["gpt.final_norm.weight"] is state["gpt.final_norm.weight"]


@pytest.mark.parametrize("key", ["gpt.text_embedding.weight", "gpt.text_head.weight"])
def test_new_rows_follow_the_per_dimension_statistics_of_the_trained_rows(key):
    state = _trained_like_state()
    grown = resize_text_rows(state, NEW)[key]
    old, new = state[key], grown[OLD:]
    assert torch.allclose(new.mean(0), old.mean(0), atol=0.02)
    assert torch.allclose(new.std(0), old.std(0), rtol=0.1)
    assert new.std(0).max() < 0.25  # nothing like the unit-variance rows coqui's resize draws


def test_new_biases_are_the_mean_trained_bias():
    state = _trained_like_state()
    bias = resize_text_rows(state, NEW)["gpt.text_head.bias"]
    assert torch.allclose(bias[OLD:], state["gpt.text_head.bias"].mean().expand(NEW - OLD))


def test_seeded_reproducible_dtype_kept_and_no_op_at_same_size():
    state = _trained_like_state(torch.float16)
    a, b = resize_text_rows(state, NEW, seed=3), resize_text_rows(state, NEW, seed=3)
    c = resize_text_rows(state, NEW, seed=4)
    key = "gpt.text_embedding.weight"
    assert a[key].dtype == torch.float16 and torch.equal(a[key], b[key]) and not torch.equal(a[key], c[key])
    same = resize_text_rows(state, OLD)
    assert torch.equal(same[key], state[key]) and same[key] is not state[key]
    assert resize_text_rows({"text_head.bias": torch.zeros(3)}, 5, prefix="")["text_head.bias"].shape == (5,)
    with pytest.raises(ValueError, match="cannot shrink"):
        resize_text_rows(state, OLD - 1)


@pytest.fixture(scope="module")
def amharic_batch_model(tiny_model_dir, train_lines, nfc, tmp_path_factory):
    """The tiny model grown to a 1000-token Amharic extension by build_training_model, and a text batch."""
    from xtts_ft.base_model import BaseModelFiles
    from xtts_ft.model import build_training_model

    out = tmp_path_factory.mktemp("tiny_ext")
    report = build_extended_vocab(tiny_model_dir / "vocab.json", train_lines, 1000, out, normalizer=nfc, min_frequency=2)
    tok = AmharicTokenizer(out / "vocab.json", normalizer=nfc, char_limit=200, fold_homophones=False)
    base = BaseModelFiles.from_dir(Path(tiny_model_dir))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = build_training_model(base, out / "vocab.json", tok)
    ids = [tok.encode(line, "am") for line in train_lines[:4]]
    width = max(map(len, ids))
    text = torch.tensor([i + [0] * (width - len(i)) for i in ids])
    return model, base, report, text, torch.tensor([len(i) for i in ids])


def _losses(model, text, lengths) -> dict[str, float]:
    g = torch.Generator().manual_seed(1)
    wav = 0.1 * torch.randn(text.shape[0], 1, 2 * 22050, generator=g)
    cond = 0.1 * torch.randn(text.shape[0], 1, 1, 22050, generator=g)
    model.train(False)  # no dropout: the two initialisations see the same computation
    with torch.no_grad():
        out = model(text, lengths, model.audio_codes(wav), torch.full((text.shape[0],), 2 * 22050),
                    model.conditioning_mels(cond))
    return {k: v.item() for k, v in out.items()}


def test_built_model_keeps_base_rows_and_first_loss_is_not_inflated(amharic_batch_model):
    from xtts_ft.model import LOSS_TEXT_CE_WEIGHT, base_state_dict

    model, base, report, text, lengths = amharic_batch_model
    gpt = model.gpt
    n0, size = report.base_vocab_size, report.vocab_size
    assert gpt.text_embedding.weight.shape[0] == size
    base_state = base_state_dict(base.model_pth)
    for key in ("text_embedding.weight", "text_head.weight", "text_head.bias"):
        assert torch.equal(gpt.state_dict()[key][:n0], base_state["gpt." + key])
    assert bool((text >= n0).any())  # the batch really uses new Amharic tokens

    ours = _losses(model, text, lengths)
    saved = {k: gpt.state_dict()[k].clone() for k in ("text_embedding.weight", "text_head.weight")}
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            for key, value in saved.items():  # what coqui's resize path does: unit-variance new rows
                gpt.state_dict()[key][n0:] = torch.randn_like(value[n0:])
        noise = _losses(model, text, lengths)
    finally:
        with torch.no_grad():
            for key, value in saved.items():
                gpt.state_dict()[key].copy_(value)

    text_ce = ours["loss_text_ce"] / LOSS_TEXT_CE_WEIGHT
    assert text_ce < 1.1 * math.log(size)  # about uniform over the vocabulary: not inflated
    assert noise["loss_text_ce"] > 2 * ours["loss_text_ce"]
    assert ours["loss_mel_ce"] <= noise["loss_mel_ce"] * 1.01
    assert ours["loss"] < noise["loss"]
