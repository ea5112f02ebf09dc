"""A long recording built at test time from demo clips of one speaker, with its true joins; output readers."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

from xtts_ft.data.audio import trim_silence

REPO_ROOT = Path(__file__).resolve().parents[2]
DEMO = REPO_ROOT / "datasets" / "amharic_demo"


def demo_sentences(speaker: str = "spk1") -> list[tuple[Path, str]]:
    """The speaker's demo clips whose text is one sentence (a clip reading two would hold a join we do not know)."""
    from xtts_ft.ingest.text_units import split_sentences

    rows = [line.split("|") for line in (DEMO / "metadata.csv").read_text(encoding="utf-8").splitlines()[1:]]
    return [(DEMO / a, t) for a, t, s in rows if s == speaker and len(split_sentences(t)) == 1]


@dataclass
class Recording:
    path: Path
    sentences: list[str]  # what the audio says, in order
    spans: list[tuple[float, float]]  # speech start/end of each sentence, seconds
    rate: int

    def joins(self) -> list[float]:
        """Middle of each pause between two sentences."""
        return [(a[1] + b[0]) / 2 for a, b in zip(self.spans, self.spans[1:])]


def build_recording(path: Path, count: int, pause_s: float = 0.8, lead_s: float = 0.5, skip: int = -1,
                    seed: int = 0, start: int = 0, channels: int = 1, shortest: int = 0) -> Recording:
    """``count`` trimmed demo sentences of spk1 joined by ``pause_s`` of faint noise (sentence ``skip`` left out);
    ``shortest``: only that many of the shortest sentences (by text length), for long recordings made quickly."""
    rng = np.random.default_rng(seed)
    pool = demo_sentences()
    if shortest:
        pool = sorted(pool, key=lambda item: len(item[1]))[:shortest]
    parts, spans, texts, t = [], [], [], 0.0
    rate = 22050

    def silence(seconds: float) -> np.ndarray:
        return rng.normal(0, 0.002, int(seconds * rate)).astype(np.float32)

    parts.append(silence(lead_s))
    t = lead_s
    for k in range(count):
        audio_path, text = pool[(start + k) % len(pool)]
        if k == skip:
            continue
        y, sr = sf.read(str(audio_path), dtype="float32")
        assert sr == rate
        y = trim_silence(y, 40.0)
        y = y + rng.normal(0, 0.002, len(y)).astype(np.float32)
        parts.append(y)
        spans.append((t, t + len(y) / rate))
        texts.append(text)
        t += len(y) / rate
        parts.append(silence(pause_s))
        t += pause_s
    audio = np.concatenate(parts)
    if channels > 1:
        audio = np.stack([audio] * channels, axis=1)
    sf.write(str(path), audio, rate, subtype="PCM_16")
    return Recording(path, texts, spans, rate)


def near(t: float, points: list[float], tolerance: float) -> bool:
    return any(abs(t - p) <= tolerance for p in points)


def read_segments(out_dir) -> list[dict]:
    lines = (out_dir / "segments.tsv").read_text(encoding="utf-8").splitlines()
    header = lines[0].split("\t")
    return [dict(zip(header, line.split("\t"))) for line in lines[1:]]


def read_metadata(out_dir) -> list[dict]:
    lines = (out_dir / "metadata.csv").read_text(encoding="utf-8").splitlines()
    header = lines[0].split("|")
    return [dict(zip(header, line.split("|"))) for line in lines[1:]]
