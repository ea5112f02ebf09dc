"""Long files are read in bounded blocks, and the blocks give the same audio as one whole read."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf
import soxr

from xtts_ft.config import with_changes
from xtts_ft.ingest import source_audio
from xtts_ft.ingest.command import ingest
from xtts_ft.ingest.source_audio import IngestError, open_sources, read_blocks, read_range


@pytest.fixture
def frames_per_read(monkeypatch):
    """Every SoundFile.read's frame count (-1 would mean 'the whole file')."""
    seen: list[int] = []
    real = sf.SoundFile.read

    def counting(self, frames=-1, *args, **kwargs):
        seen.append(frames)
        return real(self, frames, *args, **kwargs)

    monkeypatch.setattr(sf.SoundFile, "read", counting)
    return seen


def _stereo_48k(path, seconds: float) -> np.ndarray:
    rng = np.random.default_rng(0)
    t = np.arange(int(seconds * 48000)) / 48000
    left = (0.3 * np.sin(2 * np.pi * 220 * t) + rng.normal(0, 0.01, len(t))).astype(np.float32)
    sf.write(str(path), np.stack([left, 0.5 * left], axis=1), 48000, subtype="PCM_24")
    return left * 0.75  # the mono mix


def test_blocks_are_bounded_and_equal_one_whole_resample(tmp_path, frames_per_read):
    mono = _stereo_48k(tmp_path / "long.wav", 12.0)
    [source] = open_sources([tmp_path / "long.wav"])
    blocks = list(read_blocks(source, block_s=2.0))
    assert len(blocks) >= 6 and all(0 < f <= 2 * 48000 for f in frames_per_read)
    streamed = np.concatenate(blocks)
    whole = soxr.resample(mono, 48000, 16000, quality="HQ")
    assert abs(len(streamed) - len(whole)) <= 2
    n = min(len(streamed), len(whole))
    assert np.max(np.abs(streamed[:n] - whole[:n])) < 1e-3  # 24-bit file, same resampler state carried over


def test_ingest_never_reads_more_than_a_block_or_a_clip(tmp_path, frames_per_read, ingest_cfg, small_recognizer):
    """An hour of 48 kHz stereo must not be decoded at once: every read is one block (or one clip when cutting)."""
    from tests.ingest.ingesthelpers import build_recording

    recording = build_recording(tmp_path / "talk.wav", 6, pause_s=0.8, channels=2)
    ingest_cfg = with_changes(ingest_cfg, ingest={"block_s": 2.0})
    report = ingest(ingest_cfg, [recording.path], tmp_path / "out", recognizer=small_recognizer)
    assert report.clips >= 5 and report.blocks_read >= 10
    longest_clip = ingest_cfg.dataset.max_duration_s * recording.rate
    assert frames_per_read and all(0 <= f <= max(2.0 * recording.rate, longest_clip) for f in frames_per_read)


def test_read_range_decodes_only_the_span(tmp_path, frames_per_read):
    mono = _stereo_48k(tmp_path / "long.wav", 5.0)
    [source] = open_sources([tmp_path / "long.wav"])
    part = read_range(source, 1.0, 1.5)
    assert frames_per_read == [24000] and np.allclose(part, mono[48000:72000], atol=1e-4)


def test_unreadable_and_missing_audio_are_one_line_errors(tmp_path):
    (tmp_path / "junk.wav").write_bytes(b"not audio at all" * 10)
    with pytest.raises(IngestError, match=r"junk.wav: cannot read the audio .*convert it"):
        open_sources([tmp_path / "junk.wav"])
    with pytest.raises(IngestError, match="gone.wav: audio file not found"):
        open_sources([tmp_path / "gone.wav"])
    assert issubclass(source_audio.IngestError, source_audio.DataError)
