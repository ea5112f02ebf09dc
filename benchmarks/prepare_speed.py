"""Benchmark: ``prepare_dataset`` with N workers vs a plain sequential librosa loop, same files.

    python benchmarks/prepare_speed.py                  # 300 clips, 2 workers
    python benchmarks/prepare_speed.py --clips 10000    # the 10,000-clip memory check

Generates N synthetic speech-like clips (44.1 kHz stereo 16-bit WAV, 1-10 s, with quiet
lead-in/out) in an LJSpeech folder, then runs each contender in its own subprocess so that
timings and peak memory do not mix:

- ours: ``prepare_dataset`` (decode, checks, mono, soxr HQ resample, trim, peak-normalise,
  16-bit WAV, hash, split, reports) with ``--workers`` processes;
- baseline: ``librosa.load(path, sr=22050, mono=True)`` -> ``soundfile.write(..., 'PCM_16')``
  for every file, sequentially.

Prints clips/s, audio hours per wall-clock minute, the speed ratio, and peak RSS (sampled with
psutil over the process and its workers when available; ru_maxrss of self and children always).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
import unicodedata
from pathlib import Path

import numpy as np
import soundfile as sf

ROOT = Path(__file__).resolve().parent.parent
SR = 44100
ETHIOPIC = [chr(c) for c in range(0x1200, 0x1357) if unicodedata.category(chr(c)) == "Lo"]


def _speech_like(rng: np.random.Generator, seconds: float) -> np.ndarray:
    """Harmonics on a wandering pitch, syllable-rate envelope, a little noise, quiet edges; stereo."""
    n = int(seconds * SR)
    t = np.arange(n) / SR
    f0 = 110 + 60 * rng.random() + 20 * np.sin(2 * np.pi * 0.7 * t + rng.random() * 6)
    phase = 2 * np.pi * np.cumsum(f0) / SR
    voice = sum(np.sin(k * phase) / k for k in range(1, 6))
    envelope = np.clip(np.sin(2 * np.pi * (3 + rng.random() * 2) * t + rng.random() * 6), 0, None) ** 0.5
    y = 0.25 * voice * envelope + 0.005 * rng.standard_normal(n)
    edge = 0.002 * rng.standard_normal(int(0.25 * SR))
    y = np.concatenate([edge, y, edge])
    return np.stack([y, 0.9 * y + 0.002 * rng.standard_normal(len(y))], axis=1)


def generate(ds: Path, clips: int, seed: int = 0) -> float:
    """Write the dataset (reused when already there); return its total duration in seconds."""
    marker = ds / "generated.json"
    if marker.is_file():
        info = json.loads(marker.read_text())
        if info.get("clips") == clips and info.get("seed") == seed:
            return info["seconds"]
    rng = np.random.default_rng(seed)
    (ds / "wavs").mkdir(parents=True, exist_ok=True)
    lines, total = [], 0.0
    for i in range(clips):
        seconds = float(rng.uniform(1.0, 10.0))
        y = _speech_like(rng, seconds)
        sf.write(str(ds / "wavs" / f"clip{i:05d}.wav"), y, SR, subtype="PCM_16")
        total += len(y) / SR
        words = ["".join(rng.choice(ETHIOPIC, size=int(rng.integers(2, 6)))) for _ in range(max(1, int(seconds * 2.5)))]
        lines.append(f"clip{i:05d}|{' '.join(words)}")
    (ds / "metadata.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    marker.write_text(json.dumps({"clips": clips, "seed": seed, "seconds": total}))
    return total


class PeakRss:
    """Sample RSS of this process plus its children (psutil), every 50 ms, in a thread."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        try:
            import psutil
        except ImportError:
            self._thread = None
            return
        self._proc = psutil.Process()
        self._psutil = psutil
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            total = 0
            try:
                procs = [self._proc] + self._proc.children(recursive=True)
                for p in procs:
                    total += p.memory_info().rss
            except (self._psutil.NoSuchProcess, self._psutil.AccessDenied):
                pass
            self.peak = max(self.peak, total)
            self._stop.wait(0.05)

    def stop(self) -> float:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return self.peak / 2**20 if self._thread is not None else float("nan")


def run_ours(ds: Path, out: Path, workers: int) -> dict:
    sys.path.insert(0, str(ROOT))
    from xtts_ft.config import Config, DatasetConfig
    from xtts_ft.data import prepare_dataset
    from xtts_ft.text_settings import make_normalizer

    normalizer, which = make_normalizer(Config().text.fold_homophones), "xtts_ft.text.normalize_text"
    cfg = DatasetConfig(path=str(ds), num_workers=workers)
    rss = PeakRss()
    start = time.perf_counter()
    report = prepare_dataset(cfg, out, normalizer=normalizer, progress=False)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "kept": report.kept, "rejected": report.rejected_total, "normalizer": which,
            "sampled_peak_mb": rss.stop(), **_rusage()}


def run_librosa(ds: Path, out: Path) -> dict:
    import librosa

    (out / "wavs").mkdir(parents=True, exist_ok=True)
    files = sorted((ds / "wavs").glob("*.wav"))
    rss = PeakRss()
    start = time.perf_counter()
    for path in files:
        y, _ = librosa.load(str(path), sr=22050, mono=True)
        sf.write(str(out / "wavs" / path.name), y, 22050, subtype="PCM_16")
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "kept": len(files), "sampled_peak_mb": rss.stop(), **_rusage()}


def _rusage() -> dict:
    kb = 1024.0  # ru_maxrss is in KiB on Linux
    return {
        "maxrss_self_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / kb,
        "maxrss_largest_child_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / kb,
    }


def _child(kind: str, ds: Path, out: Path, workers: int) -> dict:
    cmd = [sys.executable, __file__, "--child", kind, "--dir", str(ds.parent), "--workers", str(workers)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"{kind} run failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clips", type=int, default=300, help="synthetic clips to generate (default 300)")
    ap.add_argument("--workers", type=int, default=2, help="worker processes for prepare_dataset (default 2)")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/xtts_ft_prepare_bench"), help="work folder")
    ap.add_argument("--child", choices=["ours", "librosa"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    ds = args.dir / "dataset"
    if args.child:
        out = args.dir / f"out_{args.child}"
        shutil.rmtree(out, ignore_errors=True)
        result = run_ours(ds, out, args.workers) if args.child == "ours" else run_librosa(ds, out)
        print(json.dumps(result))
        return

    t = time.perf_counter()
    audio_s = generate(ds, args.clips)
    print(f"dataset: {args.clips} clips, {audio_s / 3600:.2f} h of 44.1 kHz stereo 16-bit WAV in {ds} "
          f"(ready in {time.perf_counter() - t:.0f} s); {os.cpu_count()} CPU core(s) on this machine")
    base = _child("librosa", ds, args.dir / "out_librosa", 1)
    ours = _child("ours", ds, args.dir / "out_ours", args.workers)
    print(f"normaliser used by ours: {ours['normalizer']}; ours kept {ours['kept']}, rejected {ours['rejected']}")
    print(f"{'':34}{'clips/s':>9}{'audio h/min':>13}{'wall s':>9}{'peak RSS MB (sampled | self + largest child)':>48}")
    for name, r in (("librosa sequential (1 process)", base), (f"prepare_dataset ({args.workers} workers)", ours)):
        rss = f"{r['sampled_peak_mb']:.0f} | {r['maxrss_self_mb']:.0f} + {r['maxrss_largest_child_mb']:.0f}"
        print(f"{name:34}{args.clips / r['seconds']:>9.1f}{audio_s / 3600 / (r['seconds'] / 60):>13.2f}"
              f"{r['seconds']:>9.1f}{rss:>48}")
    print(f"speed ratio (librosa time / ours): {base['seconds'] / ours['seconds']:.2f}x")


if __name__ == "__main__":
    main()
