"""CER per language: a run with base-language eval clips hears them with that language's own recogniser."""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
from pathlib import Path

import pytest

from tests.train.trainhelpers import read_metrics, small_config
from xtts_ft.asr import SMALL_MODEL_DIR
from xtts_ft.config import ConfigError, DatasetConfig, LanguageAsrConfig, config_from_dict, with_changes
from xtts_ft.data import read_metadata
from xtts_ft.layout import EVAL_CSV, TRAIN_CSV


class Heard:
    """A recogniser that remembers which files it was given (so a test can tell whose samples it heard)."""

    def __init__(self, inner) -> None:
        self.inner, self.files = inner, []

    def transcribe_files(self, paths):
        self.files += [Path(p).name for p in paths]
        return self.inner.transcribe_files(paths)


@pytest.fixture(scope="module")
def small_recognizer():
    from xtts_ft.asr.recognizer import Recognizer

    return Recognizer(SMALL_MODEL_DIR, device="cpu")


def _write_csv(path: Path, rows: list[dict]) -> Path:
    lines = ["audio_file|text|speaker_name|language"]
    lines += [f"{r['audio_file']}|{r['text']}|{r.get('speaker_name') or 'spk0'}|{r['language']}" for r in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_per_language_recognisers_are_validated_up_front(tmp_path):
    (tmp_path / "en").mkdir()
    datasets = [{"path": str(tmp_path)}, {"path": str(tmp_path / "en"), "language": "en"}]
    with pytest.raises(ConfigError) as err:
        config_from_dict({"dataset": datasets, "asr": {"per_language": {
            "am": {"model": "x/y"}, "en": {"modle": "x/y"}, "fr": {"model": "x/y"}, "de": "x/y"}}})
    problems = str(err.value).splitlines()
    assert len(problems) == 5  # one error, every problem on its own line
    assert any("asr.per_language.am: 'am' is the run's language, whose recogniser is asr.model" in p for p in problems)
    assert any("asr.per_language.en.modle: unknown key (did you mean 'model'?)" in p for p in problems)
    assert any("asr.per_language.en.model: must name a repo id or a local folder" in p for p in problems)
    assert any("asr.per_language.fr: no dataset is in 'fr'" in p for p in problems)
    assert any("asr.per_language.de: expected a mapping of keys, got str" in p for p in problems)
    cfg = config_from_dict({"dataset": datasets, "asr": {"model": "a/b", "per_language": {"en": {"model": "c/d"}}}})
    assert cfg.recognizer_settings("am") is cfg.asr  # the single form, unchanged, for the run's language
    assert (cfg.recognizer_settings("en").model, cfg.recognizer_settings("en").batch_size) == ("c/d", cfg.asr.batch_size)
    assert cfg.recognizer_settings("fr") is None


def test_plain_scoring_outside_amharic():
    from xtts_ft.text.error_rates import error_rates

    assert error_rates("Hello, World!", "hello world", language="en").cer == 0.0
    assert error_rates("Dr. Smith", "doctor smith", language="en").cer > 0  # no English normaliser: said so


def test_a_two_language_run_logs_cer_per_language_and_says_once_why_one_has_none(
        tiny_base, vocab, tokenizer, model_factory, codes_cache, dataset, small_recognizer, tmp_path, caplog):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from tests.fixtures.faults import patched_recipe
    from xtts_ft.evaluate.hook import make_eval_hook
    from xtts_ft.evaluate.languages import language_evals
    from xtts_ft.evaluate.references import pick_references
    from xtts_ft.evaluate.report import render_report
    from xtts_ft.pipeline import run_training
    from xtts_ft.text.error_rates import error_rates
    from xtts_ft.train import TrainInputs

    caplog.set_level(logging.INFO, logger="xtts_ft")
    rows = read_metadata(dataset[1])
    for r, language in zip(rows, ("am", "en", "fr", "am")):
        r["language"] = language
    rows[1]["text"] = "i have 3 cats"  # coqui's English cleaners read the 3 out: proof of the English path
    data = tmp_path / "data"
    data.mkdir()
    eval_csv = _write_csv(data / EVAL_CSV, rows)
    _write_csv(data / TRAIN_CSV, [dict(r, language="am") for r in read_metadata(dataset[0])])
    run = tmp_path / "run"
    cfg = small_config(run, training={"max_steps": 2},
                       evaluation={"every_steps": 1, "sentences": ["peter piper"], "mcd_clips": 0, "max_speakers": 1,
                                   "max_new_tokens": 8, "language_clips": 1},
                       asr={"per_language": {"en": LanguageAsrConfig(model=str(SMALL_MODEL_DIR))}, "device": "cpu"})
    cfg = dataclasses.replace(cfg, more_datasets=[DatasetConfig(language="en"), DatasetConfig(language="fr")])

    am_heard, en_heard = Heard(small_recognizer), Heard(small_recognizer)  # one small model serves both
    asked = []
    languages = language_evals(cfg, data, load_recognizer=lambda settings: asked.append(settings) or en_heard)
    assert [(lang.language, lang.recognizer is not None) for lang in languages] == [("en", True), ("fr", False)]
    assert [s.model for s in asked] == [str(SMALL_MODEL_DIR)] and asked[0].device == "cpu"
    refs = pick_references(cfg.evaluation, data, "am")
    hook = make_eval_hook(cfg, run, tokenizer, refs.speaker_wavs, refs.eval_clips, refs.seconds_per_char_range,
                          recognizer=am_heard, languages=languages)
    shutil.copytree(codes_cache, run / "cache" / "dvae_codes", dirs_exist_ok=True)
    with patched_recipe(model_factory):
        run_training(cfg, TrainInputs(base=tiny_base, vocab_path=vocab[0], base_vocab_size=vocab[1],
                                      train_csv=dataset[0], eval_csv=eval_csv, run_dir=run, eval_hook=hook),
                     tokenizer=tokenizer)

    evals = [r for r in read_metrics(run) if r.get("split") == "eval"]
    assert [r["step"] for r in evals] == [1, 2]
    for r in evals:
        assert all(isinstance(r.get(k), float) for k in ("eval_loss_am", "eval_loss_en", "eval_loss_fr", "sample_cer",
                                                          "sample_cer_en", "sample_stop_rate_en"))
        assert "sample_cer_fr" not in r and "sample_cer_am" not in r  # the run's language keeps its names
    en_stem = Path(rows[1]["audio_file"]).stem
    assert en_heard.files == [f"en_0_{en_stem}.wav"] * 2  # the English recogniser heard the English samples only
    assert am_heard.files and not any(f.startswith("en_") for f in am_heard.files)

    index = [json.loads(line) for line in (run / "samples" / "index.jsonl").read_text().splitlines()]
    english = index[-1]["language_samples"]["en"]
    assert len(english) == 1 and "three" in english[0]["normalized_text"]  # synthesised as English
    assert english[0]["cer"] == pytest.approx(error_rates("i have 3 cats", english[0]["recognized_text"], "en").cer)
    assert index[-1]["metrics"]["sample_cer_en"] == pytest.approx(english[0]["cer"])
    assert set(index[-1]["language_samples"]) == {"en"}

    why = [m for m in caplog.messages if "no sample_cer_fr" in m]
    assert len(why) == 1 and "asr.per_language names no recogniser for 'fr'" in why[0]  # once, not per evaluation
    tags = EventAccumulator(str(run / "tensorboard")).Reload().Tags()["scalars"]
    assert {"eval/sample_cer_en", "eval/loss_fr"} <= set(tags) and "eval/sample_cer_fr" not in tags
    assert "Sample CER per language" in render_report(run)


def test_a_missing_per_language_recogniser_is_named_by_its_key(dataset, tmp_path):
    from xtts_ft.config import Config
    from xtts_ft.errors import UserError
    from xtts_ft.evaluate.languages import language_evals

    rows = read_metadata(dataset[1])
    for r, language in zip(rows, ("am", "en", "am", "en")):
        r["language"] = language
    _write_csv(tmp_path / EVAL_CSV, rows)
    _write_csv(tmp_path / TRAIN_CSV, rows)
    cfg = with_changes(Config(more_datasets=[DatasetConfig(language="en")]),
                       asr={"per_language": {"en": LanguageAsrConfig(model=str(tmp_path / "no_such_model"))}})
    with pytest.raises(UserError, match=r"^asr\.per_language\.en\.model: folder '.*no_such_model' does not exist"):
        language_evals(cfg, tmp_path)
    cfg = with_changes(cfg, evaluation={"recognize": False})  # nothing is loaded: English keeps its eval loss, told why
    assert [(lang.language, lang.recognizer, lang.why_no_cer) for lang in language_evals(cfg, tmp_path)] == [
        ("en", None, "evaluation.recognize is off")]
