"""The commonvoice layout: validated.tsv / train.tsv + clips/, speakers from client_id, every row kept or rejected."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.data.datahelpers import SENTENCES, make_cfg, read_tsv, standin_normalize, write_audio
from xtts_ft.data.commonvoice import speaker_of
from xtts_ft.data.prepare import prepare_dataset
from xtts_ft.data.readers import detect_format

HEADER = "client_id\tpath\tsentence_id\tsentence\tsentence_domain\tup_votes\tdown_votes\tage\tgender\taccents\tlocale"
CLIENTS = ["a" * 64, "b" * 64]


def _row(client: str, path: str, text: str) -> str:
    return "\t".join([client, path, "sid", text, "", "2", "0", "", "", "", "am"])


def make_cv(root: Path, ext: str, tsv: str = "validated.tsv") -> Path:
    """4 good clips of 2 contributors, then: a row whose clip is missing, an empty sentence, a short row."""
    rows = []
    for i in range(4):
        write_audio(root / "clips" / f"common_voice_am_{i}.wav", seconds=2.0 + 0.3 * i, freq=200 + 40 * i)
        rows.append(_row(CLIENTS[i % 2], f"common_voice_am_{i}.{ext}", SENTENCES[i]))
    rows.append(_row(CLIENTS[0], f"common_voice_am_missing.{ext}", SENTENCES[5]))
    write_audio(root / "clips" / "common_voice_am_5.wav", seconds=2.0, freq=500)
    rows.append(_row(CLIENTS[1], f"common_voice_am_5.{ext}", "  "))
    rows.append("only\ttwo")
    if ext != "wav":
        for wav in sorted((root / "clips").glob("*.wav")):
            subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-i", str(wav), str(wav.with_suffix(f".{ext}"))],
                           check=True)
            wav.unlink()
    (root / tsv).write_text("\n".join([HEADER, *rows]) + "\n", encoding="utf-8")
    return root


def _check_every_row(report, out: Path) -> None:
    assert report.layout == "commonvoice"
    assert report.total == 7 and report.kept == 4
    assert report.rejected["missing_file"] == 1 and report.rejected["empty_text"] == 1
    assert report.rejected["bad_row"] == 1 and report.rejected_total == 3
    assert report.speakers == {speaker_of(CLIENTS[0], ""): 2, speaker_of(CLIENTS[1], ""): 2}
    rejected = {r["reason"]: r for r in read_tsv(out / "rejected.tsv")}
    assert rejected["missing_file"]["where"] == "validated.tsv:6"
    assert rejected["bad_row"]["where"] == "validated.tsv:8"
    rows = (out / "metadata_train.csv").read_text(encoding="utf-8").splitlines()
    assert len(rows) == 5 and all(r.count("|") == 2 for r in rows)


def test_commonvoice_with_wav_clips_is_detected_and_every_row_accounted(tmp_path: Path):
    root = make_cv(tmp_path / "cv", "wav")
    assert detect_format(root, []) == "commonvoice"
    out = tmp_path / "out"
    report = prepare_dataset(make_cfg(root), out, normalizer=standin_normalize, progress=False)
    _check_every_row(report, out)


NO_FFMPEG = "needs the optional ffmpeg binary (apt-get install -y ffmpeg)"


@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason=NO_FFMPEG)
def test_commonvoice_mp3_clips_decode_through_the_project_decoder(tmp_path: Path):
    root = make_cv(tmp_path / "cv", "mp3", tsv="train.tsv")
    (root / "train.tsv").rename(root / "validated.tsv")  # the same rows; validated.tsv is the one read first
    out = tmp_path / "out"
    report = prepare_dataset(make_cfg(root, format="commonvoice"), out, normalizer=standin_normalize, progress=False)
    _check_every_row(report, out)
    assert report.duration_stats["min"] > 1.5  # decoded audio, not an empty stub


def test_train_tsv_is_read_when_there_is_no_validated_tsv(tmp_path: Path):
    root = make_cv(tmp_path / "cv", "wav", tsv="train.tsv")
    report = prepare_dataset(make_cfg(root), tmp_path / "out", normalizer=standin_normalize, progress=False)
    assert report.layout == "commonvoice" and report.kept == 4


def test_speaker_names_are_short_and_stable():
    assert speaker_of("f" * 128, "x") == "cv_ffffffffff"
    assert speaker_of("  ", "fallback") == "fallback"
