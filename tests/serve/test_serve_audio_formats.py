"""Streamed bodies decode as one file: WAV with an open length piece by piece; FLAC and MP3 held to the end."""

from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile as sf

from xtts_ft.serve.audio_formats import StreamEncoder, available_formats

SR = 24000
PIECES = [np.sin(np.linspace(0, 400 * np.pi, SR // 2)).astype(np.float32) * 0.5, np.zeros(SR // 4, np.float32)]


def _stream(name: str) -> tuple[list[bytes], bytes]:
    encoder = StreamEncoder(available_formats()[name], SR)
    parts = [encoder.piece(p) for p in PIECES]
    return parts, b"".join(parts) + encoder.finish()


def test_wav_streams_each_piece_and_decodes_whole():
    parts, body = _stream("wav")
    assert all(parts) and parts[0][:4] == b"RIFF"
    audio, sr = sf.read(io.BytesIO(body), dtype="float32")
    assert sr == SR and audio.size == sum(p.size for p in PIECES)
    assert np.abs(audio[: PIECES[0].size] - PIECES[0]).max() < 1e-3


def test_flac_is_sent_at_the_end():
    parts, body = _stream("flac")
    assert parts == [b"", b""]
    assert sf.info(io.BytesIO(body)).frames == sum(p.size for p in PIECES)


def test_mp3_is_sent_at_the_end_whole():
    """libsndfile opens every MP3 with a Xing frame counting its frames: pieces joined end to end would decode as
    the first piece only, so MP3 is encoded once, at the end."""
    if "mp3" not in available_formats():
        pytest.skip("this libsndfile cannot write MP3 (needs libsndfile >= 1.1 built with LAME/mpg123)")
    parts, body = _stream("mp3")
    assert parts == [b"", b""]
    assert abs(sf.info(io.BytesIO(body)).duration - sum(p.size for p in PIECES) / SR) < 0.1
