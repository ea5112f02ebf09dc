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


def write_fake_run(run_dir, steps=(200, 400, 600), sentences=("selam", "ende't neh"), speakers=("spk_a", "spk_b")):
    """A run dir as the trainer and the eval hook leave it: metrics.jsonl, samples/, checkpoints/.

    Returns the number of sample WAVs listed in samples/index.jsonl.
    """
    import json
    import math
    from pathlib import Path

    import soundfile as sf

    run_dir = Path(run_dir)
    (run_dir / "samples").mkdir(parents=True, exist_ok=True)
    lines = []
    for step in range(10, max(steps) + 1, 10):
        loss = 3.0 * math.exp(-step / 300) + 0.5
        row = {"step": step, "loss": loss, "loss_text_ce": 0.02 * loss, "loss_mel_ce": 0.98 * loss,
               "lr": 5e-6 * min(1.0, step / 100), "grad_norm": 1.0 + 0.1 * (step % 7), "loss_scale": 1024.0 * 2 ** (step // 200),
               "skipped_steps": step // 250}
        if step == 330:
            row.pop("loss_scale")  # tolerated: keys come and go (bf16 runs have no loss scale)
        lines.append(json.dumps(row))
        if step in steps:
            lines.append(json.dumps({"split": "eval", "step": step, "eval_loss": loss + 0.2 - step / 5000,
                                     "eval_loss_mel_ce": loss + 0.1}))
    lines.append("{not json")
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    n = 0
    with (run_dir / "samples" / "index.jsonl").open("w", encoding="utf-8") as index:
        for k, step in enumerate(steps):
            step_dir = run_dir / "samples" / f"step_{step:06d}"
            step_dir.mkdir(parents=True, exist_ok=True)
            samples = []
            for s, speaker in enumerate(speakers):
                for i, text in enumerate(sentences):
                    name = f"{speaker}_{i}.wav"
                    sf.write(str(step_dir / name), voice_like(1.5, f0=120 + 20 * s, seed=i), 24000)
                    samples.append({"name": name[:-4], "speaker": speaker, "index": i, "text": text,
                                    "normalized_text": text, "path": f"samples/step_{step:06d}/{name}",
                                    "n_codes": 30 + i, "max_codes": 400, "ended_with_stop": (i + k) % 2 == 0,
                                    "duration_s": 1.5, "seconds_per_char": 0.1, "seconds_per_char_in_range": i == 0,
                                    "silence_ratio": 0.1 * k, "rtf": 0.4, "synthesis_s": 0.2})
                    n += 1
            metrics = {"sample_stop_rate": 0.5 + 0.2 * k, "sample_silence_ratio": 0.1 * k, "sample_rtf": 0.4,
                       "sample_seconds_per_char": 0.1, "mcd": 9.0 - k}
            index.write(json.dumps({"step": step, "dir": f"samples/step_{step:06d}", "samples": samples,
                                    "mcd_samples": [], "metrics": metrics,
                                    "seconds_per_char_range": [0.06, 0.14]}) + "\n")
    for step in steps[1:]:
        (run_dir / "checkpoints" / f"step_{step:06d}").mkdir(parents=True, exist_ok=True)
    return n
