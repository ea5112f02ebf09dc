"""The committed small recogniser hears demo clips it was never trained on.

It was trained by utils/train_small_asr.py on espeak-ng speech of the project's own text, with every
line that touches the demo sentences left out; the demo clips use espeak-ng voices too, but other
sentences, so they measure recognition of unseen text.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import re
from pathlib import Path

import pytest

from xtts_ft.asr import SMALL_MODEL_DIR
from xtts_ft.asr.recognizer import Recognizer
from xtts_ft.text.error_rates import corpus_cer, scoring_text
from xtts_ft.text.script import is_ethiopic_letter

REPO_ROOT = Path(__file__).resolve().parents[2]
DEMO = REPO_ROOT / "datasets" / "amharic_demo"
CER_TARGET = 0.15


@pytest.fixture(scope="module")
def demo_heard():
    rows = list(csv.reader((DEMO / "metadata.csv").open(encoding="utf-8"), delimiter="|"))[1:]
    rec = Recognizer(SMALL_MODEL_DIR, device="cpu", batch_size=16)
    heard = rec.transcribe_files([DEMO / r[0] for r in rows])
    return [(r[1], h) for r, h in zip(rows, heard)]


def test_small_recogniser_hears_unseen_demo_clips_below_the_target(demo_heard):
    # Clips with digits, Latin words or abbreviations are scored apart: espeak-ng reads "2015" or "BBC"
    # its own way, which need not match the project's normaliser (all 66 clips together: CER 0.156).
    plain = [(ref, heard) for ref, heard in demo_heard if not re.search(r"[0-9A-Za-z/]|\.\S", ref)]
    assert len(plain) >= 50
    cer = corpus_cer(plain)
    assert cer < CER_TARGET, f"demo CER {cer:.3f}"
    assert corpus_cer(demo_heard) < 0.2
    report = json.loads((SMALL_MODEL_DIR / "training_report.json").read_text(encoding="utf-8"))
    assert report["held_out_espeak_cer"] < CER_TARGET  # what the training script measured


def test_output_is_ethiopic_letters_and_spaces(demo_heard):
    text = "".join(h for _, h in demo_heard)
    assert text and all(ch == " " or is_ethiopic_letter(ch) for ch in text)


def test_the_training_text_never_contains_a_demo_sentence():
    spec = importlib.util.spec_from_file_location("train_small_asr", REPO_ROOT / "utils" / "train_small_asr.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    clauses, excluded = script.collect_clauses()
    demo = {scoring_text(line) for line in (REPO_ROOT / "utils" / "demo_sentences_am.txt").read_text("utf-8").splitlines()}
    demo.discard("")
    assert excluded > 0 and len(clauses) > 5000
    assert not any(c in d for d in demo for c in clauses)


def test_transcribe_command_prints_path_tab_text(capsys, monkeypatch):
    from xtts_ft.cli import main

    monkeypatch.chdir(REPO_ROOT)  # configs/demo.yaml names the model by a path relative to the repository

    clip = str(DEMO / "wavs" / "spk1_001.flac")
    assert main(["transcribe", "--config", str(REPO_ROOT / "configs" / "demo.yaml"), clip]) == 0
    path, text = capsys.readouterr().out.strip().split("\t")
    assert path == clip and scoring_text(text)


def test_transcribe_with_a_missing_model_is_one_line(capsys, tmp_path):
    from xtts_ft.cli import main

    clip = str(DEMO / "wavs" / "spk1_001.flac")
    code = main(["transcribe", "--config", str(REPO_ROOT / "configs" / "demo.yaml"), "--model",
                 str(tmp_path / "no_model"), clip])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "asr.model: folder" in err


def test_a_sample_too_short_to_hear_scores_as_unheard_and_the_command_refuses_it(tmp_path):
    """Evaluation scores whatever the model said: an 85 ms sample (a model that stopped at once) is heard as
    (almost) nothing instead of failing the evaluation; the transcribe command still refuses such a file."""
    import numpy as np
    import soundfile as sf

    from xtts_ft.errors import DataError

    short = tmp_path / "short.wav"
    sf.write(short, np.zeros(int(0.085 * 24000), dtype=np.float32), 24000)
    normal = DEMO / "wavs" / "spk1_001.flac"
    rec = Recognizer(SMALL_MODEL_DIR, device="cpu", batch_size=4)
    heard_short, heard_normal = rec.transcribe_files([short, normal])
    assert len(heard_short.replace(" ", "")) <= 1 and len(heard_normal) > 5
    with pytest.raises(DataError, match="only 85 ms of audio"):
        rec.transcribe_files([short], refuse_short=True)
