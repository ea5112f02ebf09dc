"""The golden-codes setup shared by tests/inference/test_batch_decode.py and tests/assets/make_golden_codes.py.

The tiny random model (seed 0, tests/fixtures) with its attention made to matter, the tiny vocab plus
``[am]``, an identity normaliser, the demo dataset's first clip as the voice, fixed texts and seeds,
coqui's own sampling settings at the evaluation's temperature and a 24-code limit (a random GPT never says stop).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from tests.evaluate.evalhelpers import identity

REPO_ROOT = Path(__file__).resolve().parents[2]
GOLDEN = REPO_ROOT / "tests" / "assets" / "golden_codes.json"
VOICE = REPO_ROOT / "datasets" / "amharic_demo" / "wavs" / "spk1_001.flac"
TEXTS = ["the quick brown fox", "peter piper picked a peck", "hello", "a b c d e f g", "jumps over the lazy dog"]
SEEDS = [0, 1, 2, 3, 4]
MAX_CODES = 24
TEMPERATURE = 0.75


class CodeRecorder(StoppingCriteria):
    """Never stops generation; remembers the codes generated so far (batch of one)."""

    def __init__(self) -> None:
        self.prompt_len: Optional[int] = None
        self.codes: Optional[torch.Tensor] = None

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs) -> torch.Tensor:
        if self.prompt_len is None:  # first call: the prompt plus one new token
            self.prompt_len = input_ids.shape[1] - 1
        self.codes = input_ids[0, self.prompt_len :].detach().cpu()
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


def golden_model(tiny_base, am_vocab):
    """(xtts, tokenizer, (gpt_cond_latent, speaker_embedding)) ready for inference."""
    from xtts_ft.inference.conditioning import conditioning
    from xtts_ft.model import build_xtts
    from xtts_ft.tokenizer.voice_tokenizer import AmharicTokenizer

    tokenizer = AmharicTokenizer(str(am_vocab), normalizer=identity, char_limit=200, fold_homophones=False)
    xtts = build_xtts(tiny_base, am_vocab, tokenizer)
    xtts.train(False)
    with torch.no_grad():  # a random GPT2's attention adds almost nothing to the residual stream, so its codes
        for block in xtts.gpt.gpt.h:  # would not depend on the text at all; scaled up, they do (and the prefix matters)
            block.attn.c_proj.weight.mul_(30.0)
            block.attn.c_attn.weight[:, : 2 * block.attn.c_attn.weight.shape[0]].mul_(4.0)  # queries and keys
    with torch.inference_mode():
        latents = conditioning(xtts, VOICE)
    return xtts, tokenizer, latents


def coqui_codes(xtts, latents, text: str, seed: int, **kwargs) -> list[int]:
    """The codes coqui's ``Xtts.inference`` generates for ``text`` from ``seed`` (at most MAX_CODES)."""
    from xtts_ft.evaluate.synthesis import gpt_ready_for_inference

    recorder = CodeRecorder()
    with torch.inference_mode(), gpt_ready_for_inference(xtts, MAX_CODES), torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        xtts.inference(text, "am", latents[0], latents[1], temperature=TEMPERATURE,
                       stopping_criteria=StoppingCriteriaList([recorder]), **kwargs)
    return recorder.codes.tolist()


def read_golden() -> dict:
    return json.loads(GOLDEN.read_text(encoding="utf-8"))
