"""Helpers for the data-preparation tests: a stand-in normaliser, a tokenizer predicate, synthetic audio.

A uniquely named module (not conftest) so test files can import it without clashing with other test folders.
"""

from __future__ import annotations

import csv
import unicodedata
from pathlib import Path

import numpy as np
import soundfile as sf

from xtts_ft.config import DatasetConfig

# Distinct Amharic sentences (each 20-40 characters: 5-20 chars/s on 2-4 s clips).
SENTENCES = [
    "ሰላም እንዴት ነህ ዛሬ ጥሩ ቀን ነው",
    "ኢትዮጵያ ጥንታዊ ሀገር ናት",
    "ተማሪዎቹ ትምህርታቸውን አጠናቀቁ",
    "ቡና በጣም ጣፋጭ ነው እባክህ ስጠኝ",
    "አዲስ አበባ ትልቅ ከተማ ናት",
    "ልጆቹ በሜዳ ላይ ይጫወታሉ",
    "መጽሐፉን ትናንት አነበብኩት",
    "ዝናቡ ዛሬ ማታ ይዘንባል",
    "እናቴ ምግብ እያበሰለች ነው",
    "ገበያው ዛሬ ብዙ ሰው አለው",
    "ወንድሜ ወደ ትምህርት ቤት ሄደ",
    "አባቴ ጋዜጣ እያነበበ ነው",
    "የአየሩ ሁኔታ በጣም ጥሩ ነው",
    "እሷ ቆንጆ ዘፈን ትዘፍናለች",
    "ነገ ጠዋት እንገናኛለን",
    "ሻይ ወይስ ቡና ትፈልጋለህ",
]


def standin_normalize(text: str) -> str:
    """Stand-in for xtts_ft.text.normalize_text: NFC and collapsed spaces (module level: picklable)."""
    return " ".join(unicodedata.normalize("NFC", text).split())


def ethiopic_only(ch: str) -> bool:
    """A stand-in tokenizer predicate: Ethiopic letters and punctuation only."""
    return 0x1200 <= ord(ch) <= 0x137F


def tone(seconds: float, sr: int = 22050, freq: float = 220.0, amp: float = 0.5, pad: float = 0.15) -> np.ndarray:
    """A modulated tone with `pad` seconds of silence on each side (float64, mono)."""
    t = np.arange(int(seconds * sr)) / sr
    y = amp * np.sin(2 * np.pi * freq * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 2.0 * t))
    z = np.zeros(int(pad * sr))
    return np.concatenate([z, y, z])


def write_audio(path: Path, seconds: float = 2.0, sr: int = 22050, freq: float = 220.0, channels: int = 1, **kw) -> Path:
    """Write a tone; kw: subtype, format, amp, pad."""
    y = tone(seconds, sr, freq, kw.pop("amp", 0.5), kw.pop("pad", 0.15))
    if channels > 1:
        y = np.stack([y * (1.0 - 0.1 * c) for c in range(channels)], axis=1)
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(str(path), y, sr, **kw)
    return path


def read_tsv(path: Path) -> list[dict]:
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))


def make_cfg(path: Path, **kw) -> DatasetConfig:
    """A config for tests: one worker (fast), no eval split unless asked."""
    kw.setdefault("num_workers", 1)
    kw.setdefault("eval_fraction", 0.0)
    return DatasetConfig(path=str(path), **kw)
