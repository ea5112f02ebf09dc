"""What evaluation compares against: reference voices, eval clips and the training data's pace.

Default voices are the longest eval clip of each of the first ``evaluation.max_speakers``
speakers (train clips when the eval split is empty). The seconds-per-character range is the
5th-95th percentile of the training clips, so a sample outside it is flagged as too fast/slow.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import soundfile as sf

from xtts_ft.config import EvaluationConfig
from xtts_ft.data import read_metadata
from xtts_ft.layout import EVAL_CSV, TRAIN_CSV


@dataclass
class References:
    speaker_wavs: list[Path]
    eval_clips: list[tuple[Path, str]]
    seconds_per_char_range: Optional[tuple[float, float]]


def _duration(path: str) -> float:
    info = sf.info(path)
    return float(info.frames / info.samplerate)


def pick_references(ev: EvaluationConfig, data_dir: Path, language: Optional[str] = None) -> References:
    """``language``: keep only clips of that language (a run mixing in base-language clips compares the samples,
    which are in the run's language, with clips of that language); None: every clip."""
    def of_language(rows: list[dict[str, str]]) -> list[dict[str, str]]:
        return [r for r in rows if language is None or r.get("language", language) == language]

    train = of_language(read_metadata(data_dir / TRAIN_CSV))
    evals = of_language(read_metadata(data_dir / EVAL_CSV))
    pace = [_duration(r["audio_file"]) / max(1, len(r["text"])) for r in train]
    spc = (float(np.percentile(pace, 5)), float(np.percentile(pace, 95))) if pace else None
    if ev.speaker_wavs:
        voices = [Path(p) for p in ev.speaker_wavs]
    else:
        longest: dict[str, tuple[float, str]] = {}
        for row in evals or train:
            d = _duration(row["audio_file"])
            if d > longest.get(row["speaker_name"], (-1.0, ""))[0]:
                longest[row["speaker_name"]] = (d, row["audio_file"])
        voices = [Path(longest[s][1]) for s in sorted(longest)[: ev.max_speakers]]
    clips = [(Path(r["audio_file"]), r["text"]) for r in evals]
    return References(voices, clips, spc)
