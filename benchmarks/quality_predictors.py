"""Which quality predictor hears what a listener would, on this project's speech, and what each one costs.

    python benchmarks/quality_predictors.py                 # 12 demo clips (4 per voice), every condition
    python benchmarks/quality_predictors.py --clips 66      # the whole demo dataset
    python benchmarks/quality_predictors.py --clips 1 --conditions clean,noise_5db   # the tests' smoke run

The demo's clips (espeak-ng Amharic, datasets/amharic_demo) are spoiled the ways recordings are spoiled:
white noise at 20, 10, 5 and 0 dB SNR (against each clip's own mean power), a reverberant copy (an
exponentially decaying noise impulse response, RT60 0.6 s, mixed with the dry signal) and hard clipping
(gain x4, cut at full scale); a clean copy trimmed tightly (no pause left at its ends) shows that a tight cut
is not taken for noise. Each copy is scored by

- DNSMOS P.835 (``speechmos``, ONNX): overall (OVRL), signal (SIG) and background (BAK), as
  ``xtts_ft.quality.predictor`` runs it (one 9.01 s window);
- Distill-MOS (``distillmos``, torch), when it is installed (the project does not pin it);
- the project's SNR estimate (``xtts_ft.quality.voice_activity``: silero-vad's speech windows against its
  pause windows).

A predictor worth using scores every spoiled copy below the clean clip, and lower the worse it is spoiled.
The second table is the cost per clip, against prepare's audio stage on the same clip (the issue's rule:
prepare runs the predictor only if it costs less than that), with speechmos's own scoring of every
one-second hop beside the single window used here (and the largest difference between their OVRL).
docs/DESIGN.md "Quality predictor" records a run of it.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from pathlib import Path

import librosa
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from xtts_ft.audio_io import RECOGNIZER_RATE, load_audio  # noqa: E402
from xtts_ft.config import DatasetConfig  # noqa: E402
from xtts_ft.data.audio import AudioJob, AudioSettings, process_audio  # noqa: E402
from xtts_ft.quality.onnx_models import dnsmos  # noqa: E402
from xtts_ft.quality.predictor import predict_quality  # noqa: E402
from xtts_ft.quality.voice_activity import snr_db, speech_mask, speech_probabilities  # noqa: E402

DEMO = ROOT / "datasets" / "amharic_demo" / "wavs"
RATE = RECOGNIZER_RATE
RT60_S = 0.6
CLIP_GAIN = 4.0


def add_noise(y: np.ndarray, snr: float, rng: np.random.Generator) -> np.ndarray:
    noise = rng.standard_normal(len(y)).astype(np.float32)
    return y + noise * np.sqrt(np.mean(y ** 2) / 10.0 ** (snr / 10.0))


def reverberate(y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    t = np.arange(int(RT60_S * RATE)) / RATE
    response = rng.standard_normal(len(t)) * np.exp(-6.9 * t / RT60_S)  # -60 dB at RT60
    response[0] = 1.0
    wet = np.convolve(y, response)[: len(y)]
    return (0.9 * wet / np.abs(wet).max()).astype(np.float32)


CONDITIONS = {
    "clean": lambda y, rng: y,
    "noise_20db": lambda y, rng: add_noise(y, 20, rng),
    "noise_10db": lambda y, rng: add_noise(y, 10, rng),
    "noise_5db": lambda y, rng: add_noise(y, 5, rng),
    "noise_0db": lambda y, rng: add_noise(y, 0, rng),
    "reverb_0.6s": reverberate,
    "clipped_x4": lambda y, rng: np.clip(CLIP_GAIN * y, -1.0, 1.0),
    # clean, but trimmed as tightly as librosa.effects.trim(top_db=20) does: no pause left at either end
    "trimmed_tight": lambda y, rng: librosa.effects.trim(y, top_db=20)[0],
}


def distill_mos_model():
    """Distill-MOS when installed, else None (it prints a line when it loads its weights)."""
    if importlib.util.find_spec("distillmos") is None:
        return None
    import distillmos

    return distillmos.ConvTransformerSQAModel().eval()


def distill_mos(model, y: np.ndarray) -> float:
    import torch

    with torch.inference_mode():
        return float(model(torch.from_numpy(np.ascontiguousarray(y, np.float32))[None]).item())


def timed(fn, *args):
    start = time.perf_counter()
    value = fn(*args)
    return value, time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clips", type=int, default=12, help="demo clips, taken evenly from the three voices")
    parser.add_argument("--conditions", default=",".join(CONDITIONS), help="comma-separated, of: " + ", ".join(CONDITIONS))
    parser.add_argument("--no-distill", action="store_true", help="leave Distill-MOS out even when installed")
    args = parser.parse_args(argv)
    conditions = [c.strip() for c in args.conditions.split(",") if c.strip()]
    unknown = [c for c in conditions if c not in CONDITIONS]
    if unknown:
        parser.error(f"unknown condition(s) {', '.join(unknown)}")
    files = sorted(DEMO.glob("*.flac"))
    by_voice = [sorted(f for f in files if f.name.startswith(v)) for v in ("spk1", "spk2", "spk3")]
    picked = [f for group in zip(*by_voice) for f in group][: args.clips]
    distill = None if args.no_distill else distill_mos_model()
    rng = np.random.default_rng(0)
    rows: dict[str, list[tuple]] = {c: [] for c in conditions}
    cost: dict[str, list[float]] = {k: [] for k in ("audio stage", "VAD + SNR", "DNSMOS (one window)",
                                                     "DNSMOS (speechmos, every hop)", "Distill-MOS")}
    hop_difference = 0.0
    settings = AudioSettings.from_config(DatasetConfig())
    with tempfile.TemporaryDirectory() as tmp:
        for i, path in enumerate(picked):
            _, seconds = timed(process_audio, AudioJob(path.name, str(path), f"{tmp}/{i}.wav", settings))
            cost["audio stage"].append(seconds)
            clean = load_audio(path, RATE)[0]
            for name in conditions:
                y = CONDITIONS[name](clean, rng).astype(np.float32)
                (snr, seconds) = timed(lambda a: snr_db(a, speech_mask(speech_probabilities(a))), y)
                cost["VAD + SNR"].append(seconds)
                quality, seconds = timed(predict_quality, y)
                cost["DNSMOS (one window)"].append(seconds)
                score = distill_mos(distill, y) if distill is not None else float("nan")
                if name == "clean":
                    every_hop, seconds = timed(dnsmos(), np.clip(y, -1, 1), RATE, False)
                    cost["DNSMOS (speechmos, every hop)"].append(seconds)
                    hop_difference = max(hop_difference, abs(float(every_hop["ovrl_mos"]) - quality.overall))
                    if distill is not None:
                        cost["Distill-MOS"].append(timed(distill_mos, distill, y)[1])
                rows[name].append((quality.overall, quality.signal, quality.background, score,
                                   np.nan if snr is None else snr))
    print(f"{len(picked)} demo clip(s), mean of each score (SNR estimate: median, and lowest-highest)")
    print(f"{'condition':<13}{'OVRL':>7}{'SIG':>7}{'BAK':>7}{'DistillMOS':>12}{'SNR est dB':>12}  range")
    clean_row = None
    for name, values in rows.items():
        a = np.asarray(values, dtype=np.float64)
        means = [np.nanmean(a[:, k]) if np.isfinite(a[:, k]).any() else np.nan for k in range(4)]
        finite = a[:, 4][np.isfinite(a[:, 4])]
        snr, low, high = (np.median(finite), finite.min(), finite.max()) if finite.size else (np.nan,) * 3
        print(f"{name:<13}{means[0]:>7.2f}{means[1]:>7.2f}{means[2]:>7.2f}{means[3]:>12.2f}{snr:>12.1f}  "
              f"{low:.1f} to {high:.1f}" + (f" ({len(a) - finite.size} without)" if finite.size < len(a) else ""))
        if name == "clean":
            clean_row = means
        elif clean_row is not None:
            below = [f"{label} {'below' if m < c else 'NOT below'}" for label, m, c in
                     zip(("OVRL", "DistillMOS"), (means[0], means[3]), (clean_row[0], clean_row[3])) if np.isfinite(m)]
            print(f"{'':<13}against clean: {', '.join(below)}")
    print("\ncost per clip (s), this machine, one thread each")
    for name, values in cost.items():
        if values:
            print(f"  {name:<32}{np.mean(values):>8.4f}  ({len(values)} runs)")
    print(f"  DNSMOS one window against speechmos's every hop: largest OVRL difference {hop_difference:.3f}")
    stage = np.mean(cost["audio stage"])
    print(f"  DNSMOS (one window) / audio stage: {np.mean(cost['DNSMOS (one window)']) / stage:.1f}x; "
          f"VAD + SNR / audio stage: {np.mean(cost['VAD + SNR']) / stage:.1f}x")


if __name__ == "__main__":
    main()
