"""The mel loss ignores every row's own prompt (coqui's GPT masks only the last row, at 4x the positions)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from xtts_ft.base_model import BaseModelFiles
from xtts_ft.model import build_training_model

STRIDE = 1024


@pytest.fixture(scope="module")
def model(tiny_base_dir):
    from xtts_ft.tokenizer.voice_tokenizer import AmharicTokenizer

    base = BaseModelFiles.from_dir(tiny_base_dir)
    tokenizer = AmharicTokenizer(str(base.vocab_json), char_limit=200, fold_homophones=False)
    built = build_training_model(base, base.vocab_json, tokenizer)
    return built.eval()  # no dropout: the GPT's logits are the same on every call


def _batch(gpt):
    """Three clips of 30, 20 and 12 codes with prompts of different lengths at different places."""
    torch.manual_seed(0)
    codes_len = [30, 20, 12]
    wav_lengths = torch.tensor([n * STRIDE for n in codes_len])
    audio_codes = torch.randint(0, gpt.stop_audio_token - 2, (3, max(codes_len)))
    cond_idxs = torch.tensor([[4 * STRIDE, 14 * STRIDE], [2 * STRIDE + 100, 6 * STRIDE + 50], [0, 3 * STRIDE]])
    text = torch.randint(5, 40, (3, 6), dtype=torch.int32)
    cond_mels = torch.randn(3, 1, 80, 40)
    return dict(text_inputs=text, text_lengths=torch.tensor([6, 4, 5]), audio_codes=audio_codes,
                wav_lengths=wav_lengths, cond_mels=cond_mels), codes_len, cond_idxs


def _reference_loss(logits, audio_codes, codes_len, stop, masked_spans):
    """Cross-entropy over an explicit list of (row, position, target): codes, then stop tokens, minus the masks."""
    terms = []
    for row, n in enumerate(codes_len):
        targets = audio_codes[row, :n].tolist() + [stop] * 4  # 3 stop codes of padding + the final stop
        for pos, target in enumerate(targets):
            if not any(r == row and lo <= pos < hi for r, lo, hi in masked_spans):
                terms.append(F.cross_entropy(logits[row, :, pos][None].float(), torch.tensor([target])))
    return torch.stack(terms).mean()


def test_every_rows_prompt_is_excluded_from_the_mel_loss(model):
    gpt = model.xtts.gpt
    inputs, codes_len, cond_idxs = _batch(gpt)
    with torch.no_grad():
        ours = model(**inputs, cond_idxs=cond_idxs.clone())["loss_mel_ce"]
        _, coqui_mel, logits = gpt(**inputs, cond_idxs=cond_idxs.clone())  # coqui's own masking
    stop = gpt.stop_audio_token
    # ours: each row's codes overlapping its crop -> row 0: 4..14, row 1: 2..7 (partial codes count), row 2: 0..3
    right = _reference_loss(logits, inputs["audio_codes"], codes_len, stop, [(0, 4, 14), (1, 2, 7), (2, 0, 3)])
    assert torch.allclose(ours, right, atol=1e-5)
    # coqui 0.28: only the last row, with the sample indices divided by 256 instead of 1024 -> 0..12 there
    bug = _reference_loss(logits, inputs["audio_codes"], codes_len, stop, [(2, 0, 3 * STRIDE // 256)])
    assert torch.allclose(coqui_mel, bug, atol=1e-5)
    assert not torch.allclose(ours, coqui_mel, atol=1e-3)


def test_without_prompt_indices_the_loss_is_coquis(model):
    gpt = model.xtts.gpt
    inputs, _, _ = _batch(gpt)
    with torch.no_grad():
        ours = model(**inputs)["loss_mel_ce"]
        _, coqui_mel, _ = gpt(**inputs)
    assert torch.equal(ours, coqui_mel)
