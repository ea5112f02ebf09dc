"""Helpers for the evaluation tests (imported by bare name, like the other packages' test helpers)."""

from __future__ import annotations

import numpy as np
import torch

MAX_NEW_TOKENS = 8
SR = 22050


def identity(text: str) -> str:
    return text


def voice_like(seconds: float, f0: float = 130.0, seed: int = 0, sr: int = SR) -> np.ndarray:
    """A harmonic signal with a wandering pitch and syllable-rate amplitude: speech-shaped, not speech."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * sr)) / sr
    pitch = f0 + 30 * np.sin(2 * np.pi * 0.8 * t + rng.uniform(0, 6))
    phase = 2 * np.pi * np.cumsum(pitch) / sr
    env = 0.6 + 0.4 * np.sin(2 * np.pi * 4.0 * t) ** 2
    x = sum(np.sin(k * phase) * np.exp(-k / 5) for k in range(1, 16)) * env
    x += 0.003 * rng.standard_normal(t.size)
    return (0.5 * x / np.abs(x).max()).astype(np.float32)


def _batch(model, tokenizer):
    ids = tokenizer.encode("the quick brown fox", "am")
    torch.manual_seed(1)
    wav = torch.from_numpy(voice_like(2.0, seed=3)).reshape(1, 1, -1).repeat(2, 1, 1)
    codes = model.audio_codes(wav)
    cond = model.conditioning_mels(wav[:, None, :, : SR])
    text = torch.tensor([ids, ids])
    return dict(
        text_inputs=text, text_lengths=torch.tensor([len(ids)] * 2), audio_codes=codes,
        wav_lengths=torch.tensor([wav.shape[-1]] * 2), cond_mels=cond, cond_idxs=torch.tensor([[0, SR // 2]] * 2),
    )


def train_steps(model, tokenizer, steps: int = 2, lr: float = 1e-3) -> None:
    """A couple of real optimizer steps through XttsTrainingModel.forward/backward."""
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    for _ in range(steps):
        out = model(**_batch(model, tokenizer))
        out["loss"].backward()
        opt.step()
        opt.zero_grad()
