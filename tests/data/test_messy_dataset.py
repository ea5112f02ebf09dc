"""End to end on a messy coqui-layout dataset: every clip is kept or rejected with the right reason."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import numpy as np
import soundfile as sf

from tests.data.datahelpers import SENTENCES, ethiopic_only, make_cfg, read_tsv, standin_normalize, tone, write_audio
from tests.fixtures.spoiled_audio import demo_clip, with_noise
from xtts_ft.data import REASONS, prepare_dataset, read_metadata

S = SENTENCES
HAVE_FFMPEG = shutil.which("ffmpeg") is not None


def _build(tmp_path: Path) -> tuple[Path, dict[str, str], list[str]]:
    """Write the dataset; return (root, expected reason by 'where', texts expected in the output)."""
    root = tmp_path / "ds"
    w = root / "wavs"
    outside = write_audio(tmp_path / "outside.wav", 2.0, freq=500).resolve()

    write_audio(w / "stereo44.wav", 2.0, sr=44100, freq=210, channels=2)
    write_audio(w / "u8.wav", 2.0, freq=230, subtype="PCM_U8")
    write_audio(w / "f.flac", 2.0, sr=48000, freq=270, format="FLAC")
    write_audio(w / "v.ogg", 2.0, sr=16000, freq=290, format="OGG", subtype="VORBIS")
    write_audio(w / "bob_same_text.wav", 2.0, freq=310)
    write_audio(w / "dotdot_inside.wav", 2.0, freq=330)
    write_audio(w / "target_in.wav", 2.0, freq=350)
    (w / "link_in.wav").symlink_to(w / "target_in.wav")
    (w / "link_out.wav").symlink_to(outside)
    for name, freq in (("e_text", 600), ("long_text", 610), ("latin", 620), ("long", 630), ("cps", 640)):
        write_audio(w / f"{name}.wav", 13.0 if name == "long" else 3.0, sr=8000 if name == "long" else 22050, freq=freq)
    (w / "garbage.wav").write_bytes(b"this is not audio at all" * 20)
    sf.write(str(w / "empty.wav"), np.zeros(0), 22050)
    nan = tone(2.0).astype(np.float32)
    nan[500:510] = np.inf
    sf.write(str(w / "nan.wav"), nan, 22050, subtype="FLOAT")
    sf.write(str(w / "silent.wav"), np.zeros(44100), 22050)
    sf.write(str(w / "clipped.wav"), np.clip(tone(2.0) * 5, -1, 1), 22050, subtype="FLOAT")
    write_audio(w / "short.wav", 0.2, freq=650)
    sf.write(str(w / "cut.wav"), tone(2.0, freq=660)[: -int(0.4 * 22050)], 22050)  # ends mid-"word", no pause
    shutil.copyfile(w / "stereo44.wav", w / "zz_dup_audio.wav")
    write_audio(w / "zz_dup_text.wav", 2.0, freq=370)
    write_audio(w / "eval_ok.wav", 2.0, freq=390)
    write_audio(w / "eval_extra.wav", 2.0, freq=410)
    for name in ("spk1_001", "spk2_001"):  # real speech (silero hears none in a tone): clean, and at 5 dB SNR
        speech, _ = demo_clip(name)
        sf.write(str(w / f"{name}_clean.wav"), speech, 22050)
        sf.write(str(w / f"{name}_noisy.wav"), with_noise(speech, 5.0), 22050, subtype="FLOAT")

    # metadata_train.csv: BOM, CRLF, header in another column order with an extra column.
    train = [  # (speaker, audio_file, text, expected)
        ("ann", "wavs/stereo44.wav", S[0], "keep"),
        ("ann", "wavs/u8.wav", S[1], "keep"),
        ("ann", "wavs/f.flac", S[3], "keep"),
        ("ann", "wavs/v.ogg", S[4], "keep"),
        ("bob", "wavs/bob_same_text.wav", S[0], "keep"),  # same text, other speaker: kept
        ("ann", "sub/../wavs/dotdot_inside.wav", S[5], "keep"),
        ("ann", "wavs/link_in.wav", S[6], "keep"),
        ("ann", "../outside.wav", S[7], "outside_root"),
        ("ann", str(outside), S[7], "outside_root"),
        ("ann", "wavs/link_out.wav", S[7], "outside_root"),
        ("ann", "wavs/nope.wav", S[7], "missing_file"),
        (None, "justonecolumn", None, "bad_row"),
        ("ann", "", S[7], "bad_row"),
        ("ann", "wavs/e_text.wav", "   ", "empty_text"),
        ("ann", "wavs/long_text.wav", "ሀ" * 100, "text_too_long"),
        ("ann", "wavs/latin.wav", "hello " + S[7], "unencodable_text"),
        ("ann", "wavs/garbage.wav", S[7], "unreadable"),
        ("ann", "wavs/empty.wav", S[7], "empty_audio"),
        ("ann", "wavs/nan.wav", S[7], "non_finite"),
        ("ann", "wavs/silent.wav", S[7], "silent"),
        ("ann", "wavs/clipped.wav", S[7], "clipped"),
        ("ann", "wavs/short.wav", S[7], "too_short"),
        ("ann", "wavs/long.wav", S[7], "too_long"),
        ("ann", "wavs/cut.wav", S[7], "cut_ending"),
        ("ann", "wavs/cps.wav", "ሀሁ", "chars_per_second"),
        ("ann", "wavs/zz_dup_audio.wav", S[8], "duplicate_audio"),
        ("ann", "wavs/zz_dup_text.wav", S[1], "duplicate_text"),
        ("cat", "wavs/spk1_001_clean.wav", S[11], "keep"),
        ("cat", "wavs/spk2_001_clean.wav", S[12], "keep"),
        ("cat", "wavs/spk1_001_noisy.wav", S[13], "noisy"),
        ("cat", "wavs/spk2_001_noisy.wav", S[14], "noisy"),
    ]
    if HAVE_FFMPEG:  # only this clip depends on the ffmpeg binary (to write an MP3)
        src = write_audio(tmp_path / "m_src.wav", 2.0, sr=44100, freq=250)
        subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-i", str(src), str(w / "m.mp3")], check=True)
        train.append(("ann", "wavs/m.mp3", S[2], "keep"))
    lines = ["speaker_name|audio_file|text|emotion_name"]
    for spk, audio, text, _ in train:
        lines.append(audio if text is None else f"{spk}|{audio}|{text}|neutral")
    (root / "metadata_train.csv").write_bytes(("\ufeff" + "\r\n".join(lines) + "\r\n").encode("utf-8"))
    expected = {f"metadata_train.csv:{i + 2}": row[3] for i, row in enumerate(train)}

    # metadata_eval.csv: no header, LF, positional columns, one row with extra columns.
    evals = [
        ("wavs/eval_ok.wav|" + S[9] + "|bob", "keep"),
        ("wavs/eval_extra.wav|" + S[10] + "|bob|extra|columns", "keep"),
        ("wavs/eval_bad.wav", "bad_row"),
    ]
    (root / "metadata_eval.csv").write_text("\n".join(r for r, _ in evals) + "\n", encoding="utf-8")
    expected.update({f"metadata_eval.csv:{i + 1}": e for i, (_, e) in enumerate(evals)})
    kept_texts = [row[2] for row in train if row[3] == "keep"] + [S[9], S[10]]
    return root, expected, kept_texts


def test_every_clip_is_kept_or_rejected_with_its_reason(tmp_path: Path):
    root, expected, kept_texts = _build(tmp_path)
    out = tmp_path / "out"
    cfg = make_cfg(root, num_workers=2, eval_fraction=0.2, max_text_chars=60)
    report = prepare_dataset(cfg, out, normalizer=standin_normalize, allowed_chars=ethiopic_only, progress=False)

    rejected = {row["where"]: row["reason"] for row in read_tsv(out / "rejected.tsv")}
    want_rejected = {where: reason for where, reason in expected.items() if reason != "keep"}
    assert rejected == want_rejected
    # the dataset exercises every reason but transcript_mismatch, which needs a recogniser
    # (tests/data/test_transcript_check.py covers it)
    assert set(want_rejected.values()) == set(REASONS) - {"transcript_mismatch"}
    assert report.rejected == {r: Counter(want_rejected.values())[r] for r in REASONS}

    rows = read_metadata(out / "metadata_train.csv") + read_metadata(out / "metadata_eval.csv")
    assert report.kept == len(kept_texts) == len(rows) == report.kept_train + report.kept_eval
    assert Counter(r["text"] for r in rows) == Counter(kept_texts)  # nothing valid was lost
    assert report.total == len(expected)
    assert report.speakers == {"ann": len(kept_texts) - 5, "bob": 3, "cat": 2}
    assert sorted(os.listdir(out / "wavs")) == sorted(Path(r["audio_file"]).name for r in rows)

    data = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert data["rejected"] == report.rejected and data["kept"] == report.kept
    assert data["examples"]["outside_root"][0]["where"].startswith("metadata_train.csv:")
    assert data["hours"] > 0 and data["duration_stats"]["count"] == report.kept
    # the SNR estimate: only the demo copies hold speech (a tone gives no estimate); the noisy ones were measured too
    assert data["snr"]["measured"] == 4 and data["snr"]["noisy"] == 2 and data["snr"]["min_snr_db"] == 15.0
    assert data["snr"]["min"] < 15.0 < data["snr"]["median"]
    assert "snr_values" not in data
    text = (out / "report.txt").read_text(encoding="utf-8")
    assert "duplicate_text" in text and "Kept" in text and "SNR estimate of 4 clip(s)" in text
    assert "Warning: 2 of 4 clips (50%) are noisy" in text  # more than a tenth of the measured clips
    assert (out / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
