"""The committed demo dataset (datasets/amharic_demo) is complete and consistent. No espeak-ng needed."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "datasets" / "amharic_demo"
SENTENCES = ROOT / "utils" / "demo_sentences_am.txt"
ETHIOPIC = re.compile(r"[\u1200-\u137f]")
HEADER = "audio_file|text|speaker_name"


def _rows() -> list[tuple[str, str, str]]:
    lines = (DEMO / "metadata.csv").read_text(encoding="utf-8").splitlines()
    assert lines[0] == HEADER
    rows = []
    for n, line in enumerate(lines[1:], 2):
        parts = line.split("|")
        assert len(parts) == 3, f"metadata.csv:{n}: expected 3 fields, got {len(parts)}"
        rows.append((parts[0], parts[1], parts[2]))
    return rows


ROWS = _rows()


def test_size_and_speakers():
    assert len(ROWS) >= 40
    speakers = {spk for _, _, spk in ROWS}
    assert len(speakers) >= 3
    assert len({rel for rel, _, _ in ROWS}) == len(ROWS), "duplicate audio_file"


@pytest.mark.parametrize("rel,text,speaker", ROWS, ids=[r[0] for r in ROWS])
def test_clip(rel, text, speaker):
    assert text.strip() == text and text, "empty or padded text"
    assert ETHIOPIC.search(text), "text has no Ethiopic letters"
    assert speaker and rel.startswith(f"wavs/{speaker}_")
    path = DEMO / rel
    assert path.is_file()
    info = sf.info(str(path))
    assert info.samplerate == 22050
    assert info.channels == 1
    audio, sr = sf.read(str(path), dtype="float32")
    assert sr == 22050 and audio.ndim == 1
    assert 1.0 <= audio.size / sr <= 11.0
    assert np.isfinite(audio).all() and np.abs(audio).max() > 0.1


def test_no_stray_audio():
    listed = {rel for rel, _, _ in ROWS}
    on_disk = {f"wavs/{p.name}" for p in (DEMO / "wavs").iterdir()}
    assert on_disk == listed


def test_transcripts_match_sentence_file():
    sentences = [s for s in SENTENCES.read_text(encoding="utf-8").splitlines() if s.strip()]
    assert [text for _, text, _ in ROWS] == sentences


def test_durations_scale_with_text_length():
    by_speaker: dict[str, tuple[list[int], list[float]]] = {}
    for rel, text, spk in ROWS:
        lengths, durations = by_speaker.setdefault(spk, ([], []))
        lengths.append(len(text))
        durations.append(sf.info(str(DEMO / rel)).duration)
    for spk, (lengths, durations) in by_speaker.items():
        r = np.corrcoef(lengths, durations)[0, 1]
        assert r > 0.7, f"{spk}: duration barely follows text length (r={r:.2f})"


def test_extra_text():
    lines = (DEMO / "extra_text.txt").read_text(encoding="utf-8").splitlines()
    lines = [line for line in lines if line.strip()]
    assert len(lines) >= 200
    assert len(set(lines)) == len(lines)
    assert all(ETHIOPIC.search(line) for line in lines)
    assert not set(lines) & {text for _, text, _ in ROWS}, "extra text repeats a transcript"
