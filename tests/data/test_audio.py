"""The audio stage of one clip: decoding, checks, conversion and output format."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tests.data.datahelpers import make_cfg, tone, write_audio
from xtts_ft.data.audio import AudioJob, AudioSettings, process_audio, trim_silence


def _run(src: Path, tmp_path: Path, **cfg):
    settings = AudioSettings.from_config(make_cfg(tmp_path, **cfg))
    dst = tmp_path / "out.wav"
    dst.unlink(missing_ok=True)
    return process_audio(AudioJob("clip", str(src), str(dst), settings)), dst


def test_stereo_44k_becomes_mono_22k_pcm16_trimmed_and_peak_normalised(tmp_path: Path):
    src = write_audio(tmp_path / "s.wav", seconds=2.0, sr=44100, channels=2, pad=0.5, amp=0.3)
    result, dst = _run(src, tmp_path)
    assert result.reason is None, result.detail
    info = sf.info(str(dst))
    assert (info.samplerate, info.channels, info.subtype) == (22050, 1, "PCM_16")
    assert 2.0 <= result.duration_s <= 2.1  # 0.5 s of silence trimmed on each side
    y, _ = sf.read(str(dst))
    assert abs(np.max(np.abs(y)) - 0.95) < 1e-3
    assert len(result.pcm_sha1) == 40


def test_loudness_none_keeps_the_level(tmp_path: Path):
    src = write_audio(tmp_path / "s.wav", seconds=1.0, amp=0.3)
    result, dst = _run(src, tmp_path, loudness="none")
    assert result.reason is None
    assert abs(np.max(np.abs(sf.read(str(dst))[0])) - 0.3) < 0.01


@pytest.mark.parametrize(
    "fmt, kw",
    [
        ("u8.wav", {"subtype": "PCM_U8"}),
        ("f.flac", {"format": "FLAC"}),
        ("v.ogg", {"format": "OGG", "subtype": "VORBIS"}),
        ("f32.wav", {"subtype": "FLOAT"}),
    ],
)
def test_formats_decode(tmp_path: Path, fmt: str, kw: dict):
    src = write_audio(tmp_path / fmt, seconds=1.0, sr=16000, **kw)
    result, _ = _run(src, tmp_path)
    assert result.reason is None, result.detail
    assert 0.95 <= result.duration_s <= 1.1


@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs the optional ffmpeg binary (apt-get install -y ffmpeg)")
def test_mp3_decodes(tmp_path: Path):
    wav = write_audio(tmp_path / "m.wav", seconds=1.0, sr=44100)
    mp3 = tmp_path / "m.mp3"
    subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-i", str(wav), str(mp3)], check=True)
    result, _ = _run(mp3, tmp_path)
    assert result.reason is None, result.detail
    assert 0.95 <= result.duration_s <= 1.15


def test_unreadable_empty_nonfinite_silent(tmp_path: Path):
    garbage = tmp_path / "g.wav"
    garbage.write_bytes(b"RIFF not really a wave file" * 10)
    assert _run(garbage, tmp_path)[0].reason == "unreadable"
    empty = tmp_path / "e.wav"
    sf.write(str(empty), np.zeros(0), 22050)
    assert _run(empty, tmp_path)[0].reason == "empty_audio"
    nan = tone(1.0).astype(np.float32)
    nan[100] = np.nan
    sf.write(str(tmp_path / "n.wav"), nan, 22050, subtype="FLOAT")
    assert _run(tmp_path / "n.wav", tmp_path)[0].reason == "non_finite"
    sf.write(str(tmp_path / "z.wav"), np.zeros(22050), 22050)
    result, dst = _run(tmp_path / "z.wav", tmp_path)
    assert result.reason == "silent" and not dst.exists()


def test_clipped_share_is_measured_before_normalisation(tmp_path: Path):
    y = tone(2.0, amp=0.5)
    few = y.copy()
    few[1000:1000 + int(0.005 * len(y))] = 1.0  # 0.5 % at full scale
    sf.write(str(tmp_path / "few.wav"), few, 22050, subtype="FLOAT")
    assert _run(tmp_path / "few.wav", tmp_path)[0].reason is None
    many = np.clip(y * 4, -1.0, 1.0)  # far more than 1 % at full scale
    sf.write(str(tmp_path / "many.wav"), many, 22050, subtype="FLOAT")
    result, _ = _run(tmp_path / "many.wav", tmp_path)
    assert result.reason == "clipped" and "full scale" in result.detail


def test_duration_limits_after_trimming(tmp_path: Path):
    short = write_audio(tmp_path / "short.wav", seconds=0.3, pad=1.0)  # 2.3 s file, 0.3 s of sound
    assert _run(short, tmp_path)[0].reason == "too_short"
    long = write_audio(tmp_path / "long.wav", seconds=12.0, sr=8000)
    assert _run(long, tmp_path)[0].reason == "too_long"


def test_huge_files_are_not_decoded(tmp_path: Path):
    src = write_audio(tmp_path / "huge.wav", seconds=121.0, sr=8000, pad=0.0)
    result, _ = _run(src, tmp_path)
    assert result.reason == "too_long" and "not decoded" in result.detail


def test_trim_silence_keeps_the_sound():
    y = tone(1.0, pad=0.5).astype(np.float32)
    trimmed = trim_silence(y, 40.0)
    assert 1.0 <= len(trimmed) / 22050 <= 1.1
    assert trim_silence(y, 0.0) is y  # 0 disables trimming


@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs the optional ffmpeg binary (apt-get install -y ffmpeg)")
def test_ffmpeg_fallback_for_formats_soundfile_cannot_read(tmp_path: Path):
    wav = write_audio(tmp_path / "a.wav", seconds=1.0, sr=44100)
    m4a = tmp_path / "a.m4a"
    subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-i", str(wav), "-c:a", "aac", str(m4a)], check=True)
    with pytest.raises(sf.LibsndfileError):
        sf.info(str(m4a))
    result, _ = _run(m4a, tmp_path)
    assert result.reason is None, result.detail


def test_clipping_is_seen_in_8bit_files(tmp_path: Path):
    loud = np.clip(tone(2.0) * 4, -1.0, 1.0)
    sf.write(str(tmp_path / "u8.wav"), loud, 22050, subtype="PCM_U8")
    assert _run(tmp_path / "u8.wav", tmp_path)[0].reason == "clipped"
