"""Measurement: does the ``cut_ending`` check reject exactly the clips that were cut mid-word?

    python benchmarks/cut_ending.py                 # the bundled demo dataset
    python benchmarks/cut_ending.py --dataset DIR   # any coqui-layout folder (audio_file|text|speaker_name)
    python benchmarks/cut_ending.py --clips 4       # the first 4 clips only (the test's quick form)

Copies every clip of the dataset twice into a temporary coqui-layout folder: as it is (espeak-ng's
clips end in silence) and cut mid-word (at the first loud 20 ms frame between 50 % and 90 % of the
clip, the sort of end a segmenter's late timestamp leaves). Runs ``prepare_dataset`` with the default
config and prints how many of each kind were rejected as ``cut_ending``, and the spread of the
measure behind it (the end's level over the clip's pause level, in dB) for both kinds, so the margin
between them (``dataset.cut_ending_margin_db``) can be judged.
"""

from __future__ import annotations

import argparse
import csv
import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import soundfile as sf

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from xtts_ft.config import DatasetConfig  # noqa: E402
from xtts_ft.data import prepare_dataset  # noqa: E402
from xtts_ft.data.levels import LEVEL_FRAME_S, ending_level  # noqa: E402
from xtts_ft.text import normalize_text  # noqa: E402


def normalize(text: str) -> str:
    return normalize_text(text, fold_homophones=True).text


def cut_mid_word(y: np.ndarray, sr: int) -> np.ndarray:
    """``y`` cut in the middle of the first loud frame (within 6 dB of its speech level) in 50-90 % of it."""
    frame = int(LEVEL_FRAME_S * sr)
    n = len(y) // frame
    levels = 10 * np.log10(np.maximum((y[: n * frame].reshape(n, frame).astype(np.float64) ** 2).mean(1), 1e-10))
    loud = np.percentile(levels, 95) - 6.0
    first = next(i for i in range(int(0.5 * n), int(0.9 * n)) if levels[i] > loud)
    return y[: first * frame + frame // 2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", type=Path, default=ROOT / "datasets" / "amharic_demo")
    ap.add_argument("--clips", type=int, default=0, help="use only the first N clips (0: all)")
    ap.add_argument("--tail-ms", type=float, default=DatasetConfig.cut_ending_tail_ms)
    args = ap.parse_args()
    with open(args.dataset / "metadata.csv", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="|", quoting=csv.QUOTE_NONE))
    rows = rows[: args.clips] if args.clips > 0 else rows
    with tempfile.TemporaryDirectory(prefix="cut_ending_") as tmp:
        root = Path(tmp) / "ds"
        (root / "wavs").mkdir(parents=True)
        lines, margins = ["audio_file|text|speaker_name"], {"good": [], "cut": []}
        for row in rows:
            y, sr = sf.read(str(args.dataset / row["audio_file"]), dtype="float32")
            stem = Path(row["audio_file"]).stem
            for kind, audio in (("good", y), ("cut", cut_mid_word(y, sr))):
                sf.write(str(root / "wavs" / f"{kind}_{stem}.wav"), audio, sr, subtype="PCM_16")
                lines.append(f"wavs/{kind}_{stem}.wav|{row['text']}|{row['speaker_name']}")
                ending = ending_level(audio, sr, args.tail_ms)
                if ending is not None:
                    margins[kind].append(ending[0] - ending[1])
        (root / "metadata.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
        cfg = DatasetConfig(path=str(root), format="coqui", eval_fraction=0.0, cut_ending_tail_ms=args.tail_ms,
                            num_workers=1)
        report = prepare_dataset(cfg, Path(tmp) / "out", normalizer=normalize, progress=False)
        with open(Path(tmp) / "out" / "rejected.tsv", encoding="utf-8", newline="") as f:
            rejected = [r for r in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)]
    others = Counter(r["reason"] for r in rejected if r["reason"] != "cut_ending")
    counts = {kind: sum(1 for r in rejected if r["reason"] == "cut_ending" and Path(r["clip_id"]).name.startswith(kind))
              for kind in ("good", "cut")}
    print(f"dataset {args.dataset}: {len(rows)} clips, each as it is and cut mid-word; "
          f"margin {cfg.cut_ending_margin_db:g} dB, tail {args.tail_ms:g} ms")
    for kind in ("good", "cut"):
        m = np.asarray(margins[kind])
        spread = f"min {m.min():.1f}, median {np.median(m):.1f}, max {m.max():.1f} dB" if m.size else "no verdicts"
        print(f"  {kind:<4}: {counts[kind]:>3} of {len(rows)} rejected as cut_ending; end over pause level: {spread}; "
              f"no verdict: {len(rows) - m.size}")
    print(f"  kept {report.kept}; other rejections: {dict(others) or 'none'}")


if __name__ == "__main__":
    main()
