"""A run mixing two datasets of different languages (Amharic + English replay clips) trains and reports both."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.slow  # a full pipeline on two datasets

ENGLISH = ["The weather is nice today, is it not?", "I bought 3 apples at the market.",
           "Please close the door behind you.", "We will meet again tomorrow morning.",
           "Reading books makes me happy.", "Dr. Smith lives on Main Street."]


def english_replay(root: Path) -> Path:
    """Six demo clips with English transcripts, labelled en (a stand-in for real base-language clips)."""
    (root / "wavs").mkdir(parents=True)
    lines = ["audio_file|text|speaker_name"]
    for i, text in enumerate(ENGLISH):
        demo = REPO_ROOT / "datasets" / "amharic_demo" / "wavs" / f"spk3_00{i + 1}.flac"
        shutil.copy(demo, root / "wavs" / f"en{i}.flac")
        lines.append(f"wavs/en{i}.flac|{text}|english_reader")
    (root / "metadata.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def test_mixed_language_run_trains_and_reports_both(tmp_path: Path, tiny_base_dir: Path):
    run_dir = tmp_path / "run"
    config = {
        "run": {"output_dir": str(run_dir), "device": "cpu"},
        "base_model": {"source": str(tiny_base_dir)},
        "dataset": [
            {"path": str(REPO_ROOT / "datasets" / "amharic_demo"), "format": "coqui", "eval_fraction": 0.1,
             "num_workers": 1},
            {"path": str(english_replay(tmp_path / "english")), "language": "en", "eval_fraction": 0.2,
             "speaker_name": "english_reader", "num_workers": 1},
        ],
        "tokenizer": {"new_tokens": 600},
        # one step, and DVAE codes for the clips it reads only (not a cache of all 72 first): the languages are
        # under test here, not the code cache
        "training": {"max_steps": 1, "batch_size": 4, "warmup_steps": 0, "num_workers": 0, "log_every": 1,
                     "lr": 1e-3, "min_conditioning_s": 0.5, "max_conditioning_s": 1.5, "cpu_threads": 1,
                     "cache_dvae_codes": False},
        "precision": {"mode": "fp32"},
        "evaluation": {"every_steps": 0, "eval_at_start": False, "recognize": False, "quality": False, "mcd_clips": 0,
                       "max_new_tokens": 10, "sentences": ["ሰላም።"], "max_speakers": 1},
        "checkpoint": {"best_metric": "eval_loss"},
    }
    path = tmp_path / "mixed.yaml"
    path.write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
    out = subprocess.run([sys.executable, "headless_train.py", "--config", str(path)], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-4000:]

    report = json.loads((run_dir / "data" / "report.json").read_text(encoding="utf-8"))
    counts = {d["language"]: (d["kept"], d["total"]) for d in report["datasets"]}
    assert counts == {"am": (66, 66), "en": (6, 6)}
    assert "(am " in out.stderr and ", en " in out.stderr  # the trainer's data check counted both languages
    assert out.stderr.count("no sample_cer_en (evaluation.recognize is off)") == 1  # said once, why no English CER
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert max(m["step"] for m in metrics if m.get("split") != "eval") == 1  # trained to max_steps

    # The English rows went through the English token path: [en] first, coqui's English cleaners (3 -> three,
    # Dr. -> doctor), no Amharic normaliser; the Amharic rows start with [am].
    from xtts_ft.config import load_config
    from xtts_ft.text_settings import TextSettings
    from xtts_ft.tokenizer.voice_tokenizer import make_tokenizer
    from xtts_ft.train.data import Limits, load_clips

    tok = make_tokenizer(run_dir / "tokenizer" / "vocab.json", TextSettings.from_config(load_config(path)))
    clips, data_report = load_clips(run_dir / "data" / "metadata_train.csv", tok, "am",
                                    Limits(max_text_tokens=400, max_audio_tokens=10**6, code_stride=1024,
                                           sample_rate=22050), progress=False)
    train_counts = {d["language"]: d["kept_train"] for d in report["datasets"]}
    assert data_report.languages == train_counts and not data_report.rejected
    en_id, am_id = tok.tokenizer.token_to_id("[en]"), tok.tokenizer.token_to_id("[am]")
    english = [c for c in clips if c.language == "en"]
    assert english and all(c.tokens[0] == en_id for c in english)
    assert all(c.tokens[0] == am_id for c in clips if c.language == "am")
    decoded = {tok.decode(c.tokens) for c in english}
    assert any("three apples" in d for d in decoded) or any("doctor smith" in d for d in decoded)
