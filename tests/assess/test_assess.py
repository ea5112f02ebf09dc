"""``python -m xtts_ft assess`` on audio made from the demo's own clips: noise, a tail of more speech, a broken file.

The issue's "done when": clips with white noise at 5 dB SNR score a lower snr_db and mos than the same clips clean;
a clip followed by 0.3 s of silence and a second of another clip's speech has tail_s >= 0.6 while the clean clip
has < 0.3; a WAV that is not audio gets an error row and the command exits non-zero. One run of the command (with
the committed small recogniser, as configs/demo.yaml names it) answers all of them.
"""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest
import soundfile as sf

from tests.fixtures.scripts import REPO_ROOT
from tests.fixtures.spoiled_audio import demo_clip, with_noise, with_tail
from xtts_ft.assess.command import COLUMNS, read_texts
from xtts_ft.errors import DataError
from xtts_ft.quality.voice_activity import snr_db, speech_mask, speech_probabilities

RATE = 22050
CLEAN = ("spk1_001", "spk3_002")


def _rows(out: str) -> dict[str, dict]:
    reader = csv.DictReader(io.StringIO(out), delimiter="\t", quoting=csv.QUOTE_NONE)
    assert tuple(reader.fieldnames) == COLUMNS
    return {row["path"].rsplit("/", 1)[-1]: row for row in reader}


def test_assess_hears_noise_a_tail_and_a_file_that_is_not_audio(tmp_path, capsys, monkeypatch):
    from xtts_ft.cli import main

    monkeypatch.chdir(REPO_ROOT)  # configs/demo.yaml names the small recogniser by a path relative to the repository
    for name in CLEAN:
        y, _ = demo_clip(name, RATE)
        sf.write(tmp_path / f"{name}.wav", y, RATE)
        sf.write(tmp_path / f"{name}_noisy.wav", with_noise(y, 5.0), RATE, subtype="FLOAT")
    y, text = demo_clip("spk1_001", RATE)
    sf.write(tmp_path / "kept_talking.wav", with_tail(y, demo_clip("spk2_004", RATE)[0], RATE), RATE)
    texts = [("spk1_001.wav", text), ("kept_talking.wav", text)]  # a text only where tail_s and cer are asserted
    (tmp_path / "not_audio.wav").write_bytes(b"RIFF....WAVE but nothing of it is audio" * 8)
    (tmp_path / "texts.tsv").write_text("".join(f"{tmp_path / f}\t{t}\n" for f, t in texts), encoding="utf-8")
    names = [f"{n}{end}.wav" for n in CLEAN for end in ("", "_noisy")] + ["kept_talking.wav", "not_audio.wav"]
    files = [str(tmp_path / f) for f in names]

    code = main(["assess", "--config", "configs/demo.yaml", "--texts", str(tmp_path / "texts.tsv"), *files])
    rows = _rows(capsys.readouterr().out)

    assert code == 1  # one file failed
    assert set(rows) == set(names)
    assert rows["spk3_002.wav"]["tail_s"] == rows["spk3_002.wav"]["cer"] == ""  # no text for it
    for name in CLEAN:
        clean, noisy = rows[f"{name}.wav"], rows[f"{name}_noisy.wav"]
        assert float(noisy["snr_db"]) < 15.0 < float(clean["snr_db"]), (name, clean, noisy)
        assert float(noisy["mos"]) < float(clean["mos"]) - 0.3, (name, clean, noisy)
        assert clean["error"] == noisy["error"] == ""
    assert float(rows["spk1_001.wav"]["tail_s"]) < 0.3 <= 0.6 <= float(rows["kept_talking.wav"]["tail_s"])
    assert float(rows["spk1_001.wav"]["cer"]) < float(rows["kept_talking.wav"]["cer"])  # the tail is heard too
    broken = rows["not_audio.wav"]
    assert broken["error"].startswith("cannot read the audio") and broken["mos"] == broken["snr_db"] == ""


def test_a_file_without_a_text_gets_no_tail_and_a_bad_texts_line_is_one_message(tmp_path, capsys):
    from xtts_ft.assess.command import assess_command
    from xtts_ft.config import Config

    y, _ = demo_clip("spk2_001", RATE)
    sf.write(tmp_path / "a.wav", y, RATE)
    out = io.StringIO()
    assert assess_command(Config(), [str(tmp_path)], None, out=out) == 0  # a folder: its audio files; no recogniser
    row = _rows(out.getvalue())["a.wav"]
    assert row["tail_s"] == row["cer"] == "" and float(row["mos"]) > 1.0
    (tmp_path / "bad.tsv").write_text("a.wav has no tab\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"bad.tsv line 1: not path<TAB>text"):
        read_texts(tmp_path / "bad.tsv")


def test_the_vad_is_silero_s_own_sequence_model_and_a_tone_has_no_snr():
    """Our whole-clip silero-vad (onnxruntime, no torch) against silero's own SileroVADSequence: the same numbers."""
    from silero_vad import load_silero_vad

    y, _ = demo_clip("spk3_001", 16000)
    ours = speech_probabilities(y)
    theirs = load_silero_vad(sequence=True).audio_forward(y, 16000)
    np.testing.assert_array_equal(ours, theirs)
    tone = 0.5 * np.sin(2 * np.pi * 220 * np.arange(32000) / 16000).astype(np.float32)
    assert snr_db(tone, speech_mask(speech_probabilities(tone))) is None  # no speech in it: no estimate


def test_the_quality_predictors_benchmark_runs_in_its_smallest_form(capsys):
    """benchmarks/quality_predictors.py must not rot (numbers not asserted, only that each is measured)."""
    from tests.fixtures.benchmarks import left_as_found, load_benchmark

    with left_as_found():
        load_benchmark("quality_predictors").main(["--clips", "1", "--conditions", "clean,noise_5db", "--no-distill"])
    out = capsys.readouterr().out
    assert "noise_5db" in out and "against clean: OVRL" in out
    assert "DNSMOS (one window) / audio stage" in out and "largest OVRL difference" in out
