"""Measurement: does the ``cut_ending`` check reject exactly the clips that were cut mid-word?

    python benchmarks/cut_ending.py                 # the bundled demo dataset
    python benchmarks/cut_ending.py --dataset DIR   # any coqui-layout folder (audio_file|text|speaker_name)
    python benchmarks/cut_ending.py --clips 4       # the first 4 clips only (the test's quick form)

Writes every clip of the dataset in six versions, each version a coqui-layout folder of its own: as it
is (espeak-ng's clips end in silence), trimmed tightly with ``librosa.effects.trim`` at top_db 30 and 20 (what many
users' pipelines do: the last syllable's decay is all that is left of the ending), and cut mid-word
(at the first loud 20 ms frame between 50 % and 90 % of the clip, the sort of end a segmenter's late
timestamp leaves), untrimmed and trimmed at top_db 20, and cut at a random point between 50 % and 90 %
(seeded: in a word, a gap or a word's end, loud or quiet). Runs ``prepare_dataset`` twice on each: with the
old rule (the end's level against the clip's pauses only: ``cut_ending_decay_db`` set out of reach) and
with the default config, both with ``cut_ending_max_share: 1`` so that prepare reports instead of
stopping, and prints, per version and rule, how many clips were kept and how many rejected as
``cut_ending``; then the spread
of the two measures behind the verdict (the end's level over the pause level, and its fall from the
loudest frame of the last ``cut_ending_decay_ms``, for the ends above the margin: the clips it decides)
per version, so the thresholds can be judged.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

import librosa
import numpy as np
import soundfile as sf

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from xtts_ft.config import DatasetConfig  # noqa: E402
from xtts_ft.data import prepare_dataset  # noqa: E402
from xtts_ft.data.levels import LEVEL_FRAME_S, ending_fall, ending_level  # noqa: E402
from xtts_ft.errors import DataError  # noqa: E402
from xtts_ft.layout import STAGE_REPORT  # noqa: E402
from xtts_ft.text import normalize_text  # noqa: E402

KINDS = ("good", "trim30", "trim20", "cut", "cut20", "random")
OLD_RULE_DECAY_DB = 1000.0  # no end falls this far: the verdict is the pause-level margin alone


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


def variants(y: np.ndarray, sr: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    trim20 = librosa.effects.trim(y, top_db=20)[0]
    return {"good": y, "trim30": librosa.effects.trim(y, top_db=30)[0], "trim20": trim20,
            "cut": cut_mid_word(y, sr), "cut20": cut_mid_word(trim20, sr),
            "random": y[: int(rng.uniform(0.5, 0.9) * len(y))]}


def counts(out: Path, cfg: DatasetConfig) -> tuple[int, int, Counter]:
    """(clips kept, rejected as cut_ending, other rejections by reason), from prepare's report.json (written
    also when prepare stops because no clip was kept)."""
    try:
        prepare_dataset(cfg, out, normalizer=normalize, progress=False)
    except DataError as exc:
        if "no usable clips" not in str(exc):
            raise
    report = json.loads((out / STAGE_REPORT).read_text(encoding="utf-8"))
    others = Counter({r: n for r, n in report["rejected"].items() if n and r != "cut_ending"})
    return report["kept"], report["rejected"]["cut_ending"], others


def spread(values: list[float], empty: str = "no verdicts") -> str:
    v = np.asarray(values)
    return f"min {v.min():6.1f}, median {np.median(v):6.1f}, max {v.max():6.1f}" if v.size else empty


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", type=Path, default=ROOT / "datasets" / "amharic_demo")
    ap.add_argument("--clips", type=int, default=0, help="use only the first N clips (0: all)")
    args = ap.parse_args()
    with open(args.dataset / "metadata.csv", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="|", quoting=csv.QUOTE_NONE))
    rows = rows[: args.clips] if args.clips > 0 else rows
    base = DatasetConfig()
    over: dict[str, list[float]] = {k: [] for k in KINDS}
    fall: dict[str, list[float]] = {k: [] for k in KINDS}
    results: dict[str, dict[str, tuple[int, int, Counter]]] = {"before": {}, "after": {}}
    with tempfile.TemporaryDirectory(prefix="cut_ending_") as tmp:
        lines = {kind: ["audio_file|text|speaker_name"] for kind in KINDS}
        rng = np.random.default_rng(0)
        for kind in KINDS:
            (Path(tmp) / kind / "wavs").mkdir(parents=True)
        for row in rows:
            y, sr = sf.read(str(args.dataset / row["audio_file"]), dtype="float32")
            name = f"wavs/{Path(row['audio_file']).stem}.wav"
            for kind, audio in variants(y, sr, rng).items():
                sf.write(str(Path(tmp) / kind / name), audio, sr, subtype="PCM_16")
                lines[kind].append(f"{name}|{row['text']}|{row['speaker_name']}")
                ending = ending_level(audio, sr, base.cut_ending_tail_ms)
                if ending is not None:
                    over[kind].append(ending[0] - ending[1])
                if ending is not None and ending[0] - ending[1] > base.cut_ending_margin_db:
                    fall[kind].append(ending_fall(audio, sr, base.cut_ending_tail_ms, base.cut_ending_decay_ms))
        for kind in KINDS:
            root = Path(tmp) / kind
            (root / "metadata.csv").write_text("\n".join(lines[kind]) + "\n", encoding="utf-8")
            common = dict(path=str(root), format="coqui", eval_fraction=0.0, num_workers=1, cut_ending_max_share=1.0)
            old_rule = DatasetConfig(**common, cut_ending_decay_db=OLD_RULE_DECAY_DB)
            results["before"][kind] = counts(Path(tmp) / f"{kind}_before", old_rule)
            results["after"][kind] = counts(Path(tmp) / f"{kind}_after", DatasetConfig(**common))
    print(f"dataset {args.dataset}: {len(rows)} clips in {len(KINDS)} versions; margin {base.cut_ending_margin_db:g} "
          f"dB over the pauses, tail {base.cut_ending_tail_ms:g} ms; a fall of {base.cut_ending_decay_db:g} dB over "
          f"the last {base.cut_ending_decay_ms:g} ms is a last sound dying away")
    print(f"  {'version':<7}  {'before: kept / cut_ending':>26}  {'after: kept / cut_ending':>25}   "
          f"end over pauses (dB)                    fall over the last {base.cut_ending_decay_ms:g} ms, ends "
          f"over the margin (dB)")
    for kind in KINDS:
        (k0, c0, _), (k1, c1, _) = results["before"][kind], results["after"][kind]
        print(f"  {kind:<7}  {k0:>14} / {c0:>3} of {len(rows):<4}  {k1:>13} / {c1:>3} of {len(rows):<4}   "
              f"{spread(over[kind])}   {spread(fall[kind], 'none above the margin')}")
    others = {rule: {kind: dict(r[2]) for kind, r in by_kind.items() if r[2]} for rule, by_kind in results.items()}
    print(f"  other rejections: {others if any(others.values()) else 'none'}")


if __name__ == "__main__":
    main()
