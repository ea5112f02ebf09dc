"""Fixtures for the data-preparation tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.data.datahelpers import SENTENCES, write_audio


@pytest.fixture
def ljspeech(tmp_path: Path) -> Path:
    """A clean 6-clip LJSpeech folder: id|text|normalized_text, audio in wavs/."""
    root = tmp_path / "lj"
    lines = []
    for i in range(6):
        write_audio(root / "wavs" / f"LJ{i:03d}.wav", seconds=2.0 + 0.2 * i, freq=200 + 37 * i)
        lines.append(f"LJ{i:03d}|{SENTENCES[i]}|{SENTENCES[i]}")
    (root / "metadata.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root
