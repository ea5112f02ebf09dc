"""Several datasets in one prepare: each in its own folder, merged metadata with a language column,
per-dataset counts."""

from __future__ import annotations

from pathlib import Path

from tests.data.datahelpers import SENTENCES, read_tsv, standin_normalize, write_audio
from xtts_ft.config import config_from_dict, is_short_text
from xtts_ft.data import read_metadata
from xtts_ft.data.multi import prepare_datasets

ENGLISH = ["The weather is nice today, isn't it?", "I bought 3 apples at the market.",
           "Please close the door behind you.", "Dr. Smith lives on Main Street."]


def english_dataset(root: Path) -> Path:
    """4 English clips (one with an empty transcript) in the LJSpeech layout."""
    lines = []
    for i, text in enumerate([*ENGLISH[:3], ""]):
        write_audio(root / "wavs" / f"en{i}.wav", seconds=2.5, freq=300 + 30 * i)
        lines.append(f"en{i}|{text}")
    (root / "metadata.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def amharic_dataset(root: Path) -> Path:
    lines = []
    for i in range(5):
        write_audio(root / "wavs" / f"am{i}.wav", seconds=2.0 + 0.2 * i, freq=200 + 37 * i)
        lines.append(f"am{i}|{SENTENCES[i]}")
    lines.append("am_missing|" + SENTENCES[6])
    (root / "metadata.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def test_two_languages_prepare_into_one_training_set(tmp_path: Path):
    am, en = amharic_dataset(tmp_path / "am"), english_dataset(tmp_path / "en")
    cfg = config_from_dict({"dataset": [
        {"path": str(am), "num_workers": 1, "eval_fraction": 0.0, "speaker_name": "amharic_reader"},
        {"path": str(en), "language": "en", "num_workers": 1, "eval_fraction": 0.0, "speaker_name": "english_reader"},
    ]})
    seen: list[str] = []

    def amharic_normalizer(text: str) -> str:
        seen.append(text)
        return standin_normalize(text)

    out = tmp_path / "data"
    report = prepare_datasets([(d, cfg.dataset_language(d)) for d in cfg.datasets], out, "am",
                              normalizer=amharic_normalizer, progress=False)
    assert report.total == 10 and report.kept == 8 and report.rejected_total == 2
    by_name = {d["name"]: d for d in report.datasets}
    assert by_name["0_am"]["kept"] == 5 and by_name["0_am"]["language"] == "am"
    assert by_name["0_am"]["rejected"] == {"missing_file": 1}
    assert by_name["1_en"]["kept"] == 3 and by_name["1_en"]["language"] == "en"
    assert by_name["1_en"]["rejected"] == {"empty_text": 1}
    assert not any(t in seen for t in ENGLISH)  # English text never met the Amharic normaliser

    rows = read_metadata(out / "metadata_train.csv")
    short = report.short_clips  # both datasets' counts together
    assert short["clips"] == len(rows) == 8 and short["short_text"] == sum(is_short_text(r["text"]) for r in rows)
    assert {r["language"] for r in rows} == {"am", "en"}
    english = [r for r in rows if r["language"] == "en"]
    assert [r["text"] for r in english] == ENGLISH[:3]  # stored as written: coqui's English cleaners run at encode
    assert all(Path(r["audio_file"]).is_file() and r["speaker_name"] == "english_reader" for r in english)
    rejected = {r["clip_id"]: r["reason"] for r in read_tsv(out / "rejected.tsv")}
    assert rejected == {"0_am/wavs/am_missing.wav": "missing_file", "1_en/wavs/en3.wav": "empty_text"}
    text = (out / "report.txt").read_text(encoding="utf-8")
    assert "dataset 1_en [en] (ljspeech): kept 3 of 4" in text

    again = prepare_datasets([(d, cfg.dataset_language(d)) for d in cfg.datasets], out, "am",
                             normalizer=standin_normalize, progress=False)
    assert again.kept == 8 and again.processed == 0  # each dataset's own cache


def test_one_dataset_keeps_the_three_column_metadata(tmp_path: Path):
    from xtts_ft.data import prepare_dataset

    am = amharic_dataset(tmp_path / "am")
    cfg = config_from_dict({"dataset": {"path": str(am), "num_workers": 1, "eval_fraction": 0.0}}).dataset
    prepare_dataset(cfg, tmp_path / "out", normalizer=standin_normalize, progress=False)
    header = (tmp_path / "out" / "metadata_train.csv").read_text(encoding="utf-8").splitlines()[0]
    assert header == "audio_file|text|speaker_name"
