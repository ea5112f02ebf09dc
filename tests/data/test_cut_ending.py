"""The cut_ending check: clips whose audio stops mid-word are rejected, clips that end in a pause or in a
last sound dying away (a tight trim) are kept, and a dataset with too many cut words stops prepare."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import librosa
import numpy as np
import pytest
import soundfile as sf

from tests.data.datahelpers import make_cfg, read_tsv, standin_normalize, tone
from xtts_ft.config import DatasetConfig
from xtts_ft.data import prepare_command, prepare_dataset
from xtts_ft.data.levels import EndingRule, cut_word, ending_fall, ending_level
from xtts_ft.errors import DataError

REPO_ROOT = Path(__file__).resolve().parents[2]
DEMO = REPO_ROOT / "datasets" / "amharic_demo"


def _cut_in_speech(y: np.ndarray, sr: int) -> np.ndarray:
    """``y`` cut at the middle of its loudest 20 ms frame in the second half: inside a vowel."""
    frame = sr // 50
    n = len(y) // frame
    power = (y[: n * frame].reshape(n, frame).astype(np.float64) ** 2).mean(1)
    loudest = n // 2 + int(np.argmax(power[n // 2: int(n * 0.9)]))
    return y[: loudest * frame + frame // 2]


def _demo_rows() -> list[dict]:
    with open(DEMO / "metadata.csv", encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f, delimiter="|", quoting=csv.QUOTE_NONE))


def _demo_subset(tmp_path: Path, cut: set[int], n: int = 6, trim_db: float = 0.0) -> tuple[Path, list[str]]:
    """``n`` demo clips (espeak-ng speech that ends in silence), those numbered in ``cut`` cut mid-word; with
    ``trim_db`` every clip is first trimmed with ``librosa.effects.trim(top_db=trim_db)``, as users' pipelines do."""
    root = tmp_path / "ds"
    (root / "wavs").mkdir(parents=True)
    lines, names = ["audio_file|text|speaker_name"], []
    for i, row in enumerate(_demo_rows()[:n]):
        y, sr = sf.read(str(DEMO / row["audio_file"]), dtype="float32")
        if trim_db:
            y = librosa.effects.trim(y, top_db=trim_db)[0]
        name = f"wavs/clip{i}.wav"
        sf.write(str(root / name), _cut_in_speech(y, sr) if i in cut else y, sr, subtype="PCM_16")
        lines.append(f"{name}|{row['text']}|{row['speaker_name']}")
        names.append(name)
    (root / "metadata.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root, names


def test_exactly_the_clips_cut_mid_speech_are_rejected_as_cut_ending(tmp_path: Path):
    root, names = _demo_subset(tmp_path, cut={1, 3, 4})
    report = prepare_dataset(make_cfg(root, format="coqui", cut_ending_max_share=0.5), tmp_path / "out",
                             normalizer=standin_normalize, progress=False)
    rejected = {r["clip_id"]: r for r in read_tsv(tmp_path / "out" / "rejected.tsv")}
    assert {cid: r["reason"] for cid, r in rejected.items()} == {names[i]: "cut_ending" for i in (1, 3, 4)}
    assert report.rejected["cut_ending"] == 3 and report.kept == 3
    assert "dB above its pauses" in rejected[names[1]]["detail"]
    assert "cut_ending" in (tmp_path / "out" / "report.txt").read_text(encoding="utf-8")

    # switched off, the same clips are kept (the check is the only thing that rejected them)
    off = prepare_dataset(make_cfg(root, format="coqui", cut_ending_check=False), tmp_path / "out_off",
                          normalizer=standin_normalize, progress=False)
    assert off.kept == 6 and off.rejected["cut_ending"] == 0


@pytest.mark.parametrize("top_db", [30, 20])
def test_demo_clips_trimmed_tightly_are_kept_and_loud_cuts_still_rejected(top_db: int):
    """All 66 demo sentences, trimmed as librosa.effects.trim does: none is a cut word (the old 30 ms rule
    rejected 18 at top_db 30 and 34 at top_db 20); the same clips trimmed and then cut at a loud point are."""
    rule = EndingRule.from_config(DatasetConfig())
    kept_trimmed, rejected_cut = 0, 0
    for row in _demo_rows():
        y, sr = sf.read(str(DEMO / row["audio_file"]), dtype="float32")
        trimmed = librosa.effects.trim(y, top_db=top_db)[0]
        kept_trimmed += cut_word(trimmed, sr, rule) is None
        rejected_cut += cut_word(_cut_in_speech(trimmed, sr), sr, rule) is not None
    assert (kept_trimmed, rejected_cut) == (66, 66)


def test_prepare_keeps_tightly_trimmed_clips(tmp_path: Path):
    root, names = _demo_subset(tmp_path, cut=set(), n=8, trim_db=20)
    report = prepare_dataset(make_cfg(root, format="coqui"), tmp_path / "out", normalizer=standin_normalize,
                             progress=False)
    assert report.kept == 8 and report.rejected["cut_ending"] == 0


def test_too_many_cut_words_stop_prepare_naming_the_option(tmp_path: Path):
    root, names = _demo_subset(tmp_path, cut={2, 5})  # 2 of 6: a third, over the default 10 %
    with pytest.raises(DataError) as err:
        prepare_dataset(make_cfg(root, format="coqui"), tmp_path / "out", normalizer=standin_normalize,
                        progress=False)
    message = str(err.value)
    assert "\n" not in message and "dataset.cut_ending_max_share (10%)" in message
    assert "2 of 6 clips (33%)" in message and "rejected.tsv" in message
    # the reports that name the clips are written before the stop
    assert {r["clip_id"] for r in read_tsv(tmp_path / "out" / "rejected.tsv")} == {names[2], names[5]}
    # allowed a larger share, the same dataset prepares and the cut clips are left out
    report = prepare_dataset(make_cfg(root, format="coqui", cut_ending_max_share=0.4), tmp_path / "out",
                             normalizer=standin_normalize, progress=False)
    assert report.kept == 4 and report.rejected["cut_ending"] == 2


def test_the_prepare_command_stops_with_advice_it_can_follow(tmp_path: Path):
    """``prepare`` trains nothing and takes dataset.* only from a --config (a --set alone is refused): its stop says
    so, instead of "before training on the rest" and an option it cannot set (``prepare_command`` is the command)."""
    root, _ = _demo_subset(tmp_path, cut={1}, n=3)
    with pytest.raises(DataError) as err:
        prepare_command(root, tmp_path / "out", normalizer=standin_normalize, progress=False)
    message = str(err.value)
    assert "\n" not in message and "prepare stops here" in message and "training" not in message
    assert message.endswith("raise dataset.cut_ending_max_share to keep the rest; prepare takes them from a run "
                            "config: add --config RUN.yaml (then --set dataset.cut_ending_max_share=0.3 works too)")


def test_a_dying_last_sound_falls_and_a_cut_one_does_not():
    sr = 22050
    t = np.arange(int(0.6 * sr)) / sr
    voice = 0.5 * np.sin(2 * np.pi * 220.0 * t)
    lead = np.zeros(int(0.2 * sr))
    decaying = np.concatenate([lead, voice * np.exp(-t / 0.05)])[: int(0.35 * sr)]  # 174 dB/s, stopped 26 dB down
    steady = np.concatenate([lead, voice])  # stopped at full level
    rule = EndingRule(tail_ms=30.0, margin_db=10.0, decay_db=12.0, decay_ms=200.0)
    for y in (decaying, steady):  # both end well above their pause: the old 30 ms rule called both cut words
        level, pause = ending_level(y, sr, rule.tail_ms)
        assert level > pause + 20.0
    assert ending_fall(decaying, sr, 30.0, 200.0) > 15.0 and abs(ending_fall(steady, sr, 30.0, 200.0)) < 1.0
    assert cut_word(decaying, sr, rule) is None
    assert "dB above its pauses" in cut_word(steady, sr, rule)


def test_ending_level_judges_the_tail_against_the_clips_own_pauses():
    sr = 22050
    ends_quiet = tone(2.0, sr, pad=0.15)
    level, pause = ending_level(ends_quiet, sr, 30.0)
    assert level <= pause + 1.0
    cut = ends_quiet[: -int(0.15 * sr) - int(0.5 * sr)]  # its trailing pause and half a second of "speech" gone
    level, pause = ending_level(cut, sr, 30.0)
    assert level > pause + 30.0
    # a steady sound with nothing quieter in it shows no pause to compare with: no verdict, not a rejection
    assert ending_level(tone(2.0, sr, pad=0.0), sr, 30.0) is None


def test_the_measurement_script_runs_on_a_few_demo_clips():
    out = subprocess.run([sys.executable, "benchmarks/cut_ending.py", "--clips", "3"], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = {line.split()[0]: line.split() for line in out.stdout.splitlines()[2:8]}
    # version: before kept / cut_ending of n, after kept / cut_ending of n
    assert [rows[v][1:9] for v in ("good", "trim30", "cut", "cut20")] == [
        ["3", "/", "0", "of", "3", "3", "/", "0"], ["3", "/", "0", "of", "3", "3", "/", "0"],
        ["0", "/", "3", "of", "3", "0", "/", "3"], ["0", "/", "3", "of", "3", "0", "/", "3"]]
    assert rows["trim20"][1:4] == ["2", "/", "1"] and rows["trim20"][6:9] == ["3", "/", "0"]  # old rule: 1 lost
    assert rows["random"][4:6] == ["of", "3"] and "other rejections: none" in out.stdout
