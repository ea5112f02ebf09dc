"""dataset.short_clips: short pieces cut at word boundaries from the dataset's own training clips (issue 34).

Uses the demo dataset and the small committed recogniser (it hears espeak-ng speech; it never saw the demo
sentences). One prepare of the demo is shared by the module's tests (about 15 s on one core).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import soundfile as sf

from xtts_ft.asr import SMALL_MODEL_DIR
from xtts_ft.asr.recognizer import Recognizer
from xtts_ft.audio_io import load_audio
from xtts_ft.config import DatasetConfig, IngestConfig, config_from_dict, is_short_text, load_config
from xtts_ft.data import prepare_dataset
from xtts_ft.data.audio import AudioJob, AudioSettings, process_audio
from xtts_ft.data.checks import assign_names
from xtts_ft.data.derived import DerivedPiece, SourceClip, add_pieces, pieces_wanted
from xtts_ft.data.report import PIECES_FILE, PrepareReport
from xtts_ft.errors import ConfigError, ModelError
from xtts_ft.ingest.short_pieces import ShortPieceMaker, WordAligner, cut
from xtts_ft.stop_signals import StopRequested, StopSignals
from xtts_ft.text.error_rates import error_rates
from xtts_ft.text_settings import make_normalizer

REPO_ROOT = Path(__file__).resolve().parents[2]
DEMO = REPO_ROOT / "datasets" / "amharic_demo"
NORMALIZE = make_normalizer(fold_homophones=True)


@pytest.fixture(scope="module")
def recognizer():
    return Recognizer(SMALL_MODEL_DIR, device="cpu", batch_size=8)


class SpyMaker(ShortPieceMaker):
    """The real maker, remembering which clips it was given."""

    def __init__(self, recognizer) -> None:
        super().__init__(IngestConfig(), lambda: recognizer)
        self.given: list[str] = []

    def make(self, cfg, sources, wanted, folder):
        self.given = [s.clip_id for s in sources]
        return super().make(cfg, sources, wanted, folder)


def _demo_cfg(path: Path = DEMO, **overrides) -> DatasetConfig:
    """configs/demo.yaml's dataset section (defaults everywhere else), one worker."""
    return DatasetConfig(**{"path": str(path), "format": "coqui", "eval_fraction": 0.1, "split_by_speaker": True,
                            "num_workers": 1, **overrides})


def _tsv(out: Path) -> list[dict]:
    with (out / PIECES_FILE).open(encoding="utf-8") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def _csv_rows(path: Path) -> list[list[str]]:
    return [line.split("|") for line in path.read_text(encoding="utf-8").splitlines()[1:]]


@pytest.fixture(scope="module")
def demo(tmp_path_factory, recognizer):
    """The demo prepared twice into one folder: short_clips off (the share before), then the default (auto)."""
    out = tmp_path_factory.mktemp("short") / "data"
    before = prepare_dataset(_demo_cfg(short_clips="off"), out, normalizer=NORMALIZE, progress=False)
    maker = SpyMaker(recognizer)
    after = prepare_dataset(_demo_cfg(), out, normalizer=NORMALIZE, progress=False, piece_maker=maker)
    return out, before, after, maker


def test_demo_short_share_reaches_the_minimum_with_default_settings(demo):
    out, before, after, _ = demo
    minimum = DatasetConfig().short_clip_min_share
    assert before.short_clips["short_text_share"] < minimum  # the demo's sentences: (almost) none short
    assert before.short_pieces["made"] == 0 and "off" in before.short_pieces["why"]
    assert after.short_clips["short_text_share"] >= minimum
    s = after.short_pieces
    assert s["setting"] == "auto" and s["made"] == s["wanted"] >= 1
    # the pieces are in the training metadata, marked as derived by their folder, and listed with their source
    train = _csv_rows(out / "metadata_train.csv")
    derived = [r for r in train if r[0].startswith("wavs/short/")]
    assert len(derived) == s["made"] == len(_tsv(out))
    assert all((out / r[0]).is_file() and is_short_text(r[1]) for r in derived)
    assert len(train) == after.kept_train + s["made"]
    saved = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert saved["short_pieces"]["pieces"] == s["pieces"] and saved["short_clips"] == after.short_clips
    text = (out / "report.txt").read_text(encoding="utf-8")
    assert f"Short clips made from long ones (dataset.short_clips auto): {s['made']} of {s['wanted']}" in text
    warning = after.short_clip_warning()
    assert "under 20 characters" in before.short_clip_warning()
    assert warning is None or "under 20 characters" not in warning  # the text share no longer warns


def test_each_piece_is_a_contiguous_run_of_whole_words_of_its_source(demo):
    out, _, _, _ = demo
    names = assign_names(r[0] for r in _csv_rows(DEMO / "metadata.csv"))
    texts = {r[0]: r[1] for r in _csv_rows(out / "metadata_train.csv")}
    rows = _tsv(out)
    assert rows
    for row in rows:
        source_words = texts[f"wavs/{names[row['source']]}"].split()
        first, n = int(row["first_word"]) - 1, int(row["words"])
        assert 1 <= n < len(source_words)
        assert row["text"].split() == source_words[first: first + n]


def test_the_recogniser_hears_each_kept_piece_within_the_threshold(demo, recognizer):
    out, _, _, _ = demo
    rows = _tsv(out)
    heard = recognizer.transcribe_files([out / r["file"] for r in rows])
    limit = DatasetConfig().short_clips_max_cer
    for row, text in zip(rows, heard):
        assert error_rates(row["text"], text).cer <= limit, (row["file"], row["text"], text)


def test_no_piece_fails_the_cut_ending_check_and_a_cut_word_would(demo, recognizer):
    out, _, _, _ = demo
    names = assign_names(r[0] for r in _csv_rows(DEMO / "metadata.csv"))
    texts = {r[0]: r[1] for r in _csv_rows(out / "metadata_train.csv")}
    settings = AudioSettings.from_config(_demo_cfg())
    assert settings.cut_ending is not None
    aligner = WordAligner(recognizer, IngestConfig().window_s)
    cut_words = 0
    for i, row in enumerate(_tsv(out)):
        wav = out / "wavs" / names[row["source"]]
        y, rate = load_audio(wav)
        piece = out / f"check_{i}.wav"
        for end, expect in ((float(row["end_s"]), None), (None, "cut_ending")):
            if end is None:  # the same piece ending in the middle of its last word
                spans = aligner.word_spans(y, rate, texts[f"wavs/{wav.name}"].split(), 0.0)
                last = spans[int(row["first_word"]) - 2 + int(row["words"])]
                end = (last[0] + last[1]) / 2
            sf.write(piece, cut(y, rate, float(row["start_s"]), end), rate, subtype="FLOAT")
            result = process_audio(AudioJob(row["file"], str(piece), str(out / f"checked_{i}.wav"), settings))
            if expect is None:
                assert result.reason is None, (row["file"], result.detail)
            else:
                cut_words += result.reason == expect
    assert cut_words >= 1  # the check is not blind on this material: cutting a word off is caught


def test_eval_clips_are_never_given_as_sources(demo):
    out, _, after, maker = demo
    eval_rows = _csv_rows(out / "metadata_eval.csv")
    assert eval_rows and not any(r[0].startswith("wavs/short/") for r in eval_rows)
    names = assign_names(r[0] for r in _csv_rows(DEMO / "metadata.csv"))
    eval_ids = {cid for cid, name in names.items() if f"wavs/{name}" in {r[0] for r in eval_rows}}
    assert len(eval_ids) == after.kept_eval
    assert maker.given and not set(maker.given) & eval_ids
    assert len(maker.given) == after.kept_train
    assert not {r["source"] for r in _tsv(out)} & eval_ids


def test_same_dataset_same_pieces(demo, tmp_path, recognizer):
    out, _, _, _ = demo
    again = tmp_path / "again"
    prepare_dataset(_demo_cfg(), again, normalizer=NORMALIZE, progress=False, piece_maker=SpyMaker(recognizer))
    assert (again / PIECES_FILE).read_text(encoding="utf-8") == (out / PIECES_FILE).read_text(encoding="utf-8")
    for row in _tsv(out):
        assert (again / row["file"]).read_bytes() == (out / row["file"]).read_bytes()


def _swapped(root: Path, n: int = 12) -> set[str]:
    """n demo clips with the transcripts of three pairs of similar length swapped; the swapped clip ids."""
    rows = [r for r in _csv_rows(DEMO / "metadata.csv")][:n]
    (root / "wavs").mkdir(parents=True)
    for audio, _, _ in rows:
        shutil.copy(DEMO / audio, root / audio)
    by_len = sorted(range(n), key=lambda i: len(rows[i][1]))
    swapped = set()
    for a, b in ((by_len[1], by_len[2]), (by_len[5], by_len[6]), (by_len[9], by_len[10])):
        rows[a][1], rows[b][1] = rows[b][1], rows[a][1]
        swapped |= {rows[a][0], rows[b][0]}
    (root / "metadata.csv").write_text("audio_file|text|speaker_name\n" + "".join("|".join(r) + "\n" for r in rows),
                                       encoding="utf-8")
    return swapped


def test_a_clip_whose_text_does_not_match_its_audio_gives_no_pieces(tmp_path, recognizer):
    swapped = _swapped(tmp_path / "data")
    maker = SpyMaker(recognizer)
    report = prepare_dataset(_demo_cfg(tmp_path / "data", eval_fraction=0.0, short_clips=0.9), tmp_path / "out",
                             normalizer=NORMALIZE, progress=False, piece_maker=maker)
    assert swapped <= set(maker.given)  # they were offered (transcript_check is off: they are training clips)
    sources = {r["source"] for r in _tsv(tmp_path / "out")}
    assert sources and not sources & swapped  # the matching clips still give pieces; the swapped ones none
    assert report.short_pieces["dropped"].get("uncertain_alignment", 0) + \
        report.short_pieces["dropped"].get("transcript_mismatch", 0) >= len(swapped)


def test_a_stop_while_pieces_are_made_leaves_the_dataset_as_it_was(demo, tmp_path, recognizer):
    out = tmp_path / "data"
    shutil.copytree(demo[0], out)
    files = ["metadata_train.csv", "metadata_eval.csv", "report.json", "report.txt", PIECES_FILE]
    before = {f: (out / f).read_bytes() for f in files}
    wavs_before = sorted(p.relative_to(out).as_posix() for p in (out / "wavs").rglob("*"))

    class StopAfterOnePiece(SpyMaker):
        def _try(self, *args):
            piece = super()._try(*args)
            if piece is not None:
                signals.request()  # as Ctrl-C would: the maker checks before its next clip
            return piece

    with StopSignals() as signals, pytest.raises(StopRequested):
        prepare_dataset(_demo_cfg(short_clips=0.3), out, normalizer=NORMALIZE, progress=False,
                        piece_maker=StopAfterOnePiece(recognizer))
    assert {f: (out / f).read_bytes() for f in files} == before
    assert sorted(p.relative_to(out).as_posix() for p in (out / "wavs").rglob("*")) == wavs_before
    assert not list((out / ".cache").glob("short_pieces*"))  # nothing half-made is left behind


def test_a_stop_while_a_clip_is_aligned_names_the_short_pieces_not_ingest(recognizer):
    """A SIGTERM that lands in the alignment of a training run's short pieces says so, not "ingest"."""
    row = DEMO.joinpath("metadata.csv").read_text(encoding="utf-8").splitlines()[1].split("|")
    y, rate = load_audio(DEMO / row[0])
    with StopSignals() as signals, pytest.raises(StopRequested) as stop:
        signals.request()
        WordAligner(recognizer, IngestConfig().window_s).word_spans(y, rate, NORMALIZE(row[1]).split(), 0.4)
    assert str(stop.value) == "prepare (making short clips)"


def test_the_log_and_the_report_count_made_pieces_and_tried_clips_alike(tmp_path, caplog):
    """The maker's log line and the report said "27 of 27 wanted made from 36 clip(s)" and "from 27 training
    clip(s)" for one run: both now say from how many clips the pieces came, and how many were tried. The real
    maker's loop, with what the recogniser does replaced: every other clip gives one piece."""
    class EveryOtherClip(ShortPieceMaker):
        def _ready(self, auto):
            pass

        def _candidates(self, src, out):
            return ["one piece"] if int(src.clip_id[-1]) % 2 == 0 else []

        def _take_one(self, src, cands, settings, max_cer, folders, out):
            if cands:
                cands.clear()
                out.pieces.append(DerivedPiece(f"{src.clip_id}__w1-1.wav", "ቃል", src.speaker, src.clip_id, 0, 1, 0.0,
                                               0.5, 0.5, 0.0, "ቃል"))

    sources = [SourceClip(f"clip{i}", "ሁለት ቃላት", "spk", tmp_path / f"clip{i}.wav") for i in range(10)]
    cfg = DatasetConfig(path=str(tmp_path), short_clips=0.3)
    with caplog.at_level("INFO", logger="xtts_ft.ingest.short_pieces"):
        pieces, summary = add_pieces(cfg, tmp_path / "out", sources, kept=10, short=0, maker=EveryOtherClip(
            IngestConfig(), lambda: None))
    tried = summary["clips_tried"]  # in the maker's (hashed) order, the odd clips tried on the way gave none
    assert len(pieces) == summary["from_clips"] == 5 < tried
    assert caplog.messages == [f"short clips: 5 of 5 wanted, from 5 training clip(s) ({tried} tried)"]
    report = PrepareReport(0, 0, 0, 0, {}, 0.0, {}, short_pieces=summary)
    assert report.short_piece_lines() == ["Short clips made from long ones (dataset.short_clips 0.3): 5 of 5 wanted, "
                                          f"from 5 training clip(s) ({tried} tried), in metadata_train.csv and "
                                          "short_clips.tsv"]


def test_how_many_pieces_each_setting_wants():
    assert pieces_wanted("off", 0.05, 0.1, 66, 0)[0] == 0
    assert pieces_wanted("auto", 0.05, 0.1, 0, 0)[0] == 0  # nothing kept: nothing to cut
    assert pieces_wanted("auto", 0.05, 0.1, 66, 4)[0] == 0  # 6.1 % >= the minimum: auto leaves it
    wanted, why = pieces_wanted("auto", 0.05, 0.1, 66, 0)
    assert wanted == 8 and (0 + 8) / (66 + 8) >= 0.1 > (0 + 7) / (66 + 7) and "target 10%" in why
    assert pieces_wanted(0.2, 0.05, 0.1, 100, 10)[0] == 13  # a share: up to it, whatever the minimum
    assert pieces_wanted(0.2, 0.05, 0.1, 100, 25)[0] == 0


def test_without_a_maker_prepare_says_why_no_pieces_were_made(tmp_path):
    report = prepare_dataset(_demo_cfg(), tmp_path / "out", normalizer=NORMALIZE, progress=False)
    assert report.short_pieces["wanted"] >= 1 and report.short_pieces["made"] == 0
    assert "no speech recogniser for this dataset" in report.short_pieces["why"]
    assert "wavs/short/" not in (tmp_path / "out" / "metadata_train.csv").read_text(encoding="utf-8")


def test_the_setting_is_checked(tmp_path):
    ok = config_from_dict({"dataset": {"path": str(DEMO), "short_clips": 0.15}}).dataset
    assert ok.short_clips == 0.15
    for bad in (1.5, "sometimes"):
        with pytest.raises(ConfigError, match="dataset.short_clips"):
            config_from_dict({"dataset": {"path": str(DEMO), "short_clips": bad}})
    assert dataclasses.replace(ok, short_clips="off").short_clips == "off"
    # YAML 1.1 reads a bare off as false: in a config file and in --set, off still means off
    path = tmp_path / "c.yaml"
    path.write_text(f"dataset: {{path: '{DEMO}', short_clips: off}}\n", encoding="utf-8")
    assert load_config(path).dataset.short_clips == "off"
    assert load_config(path, ["dataset.short_clips=0.2"]).dataset.short_clips == 0.2
    assert load_config(path, ["dataset.short_clips=auto"]).dataset.short_clips == "auto"


def _no_recognizer():
    raise ModelError("asr.model: cannot download 'x/y' (no network)")


@pytest.mark.parametrize("maker", [ShortPieceMaker(IngestConfig(), _no_recognizer),
                                   ShortPieceMaker(IngestConfig(), _no_recognizer, "asr.model is not used by this run")],
                         ids=["recogniser-missing", "run-hears-nothing"])
def test_auto_without_a_recogniser_makes_none_and_says_why_a_share_fails(tmp_path, maker):
    report = prepare_dataset(_demo_cfg(), tmp_path / "out", normalizer=NORMALIZE, progress=False, piece_maker=maker)
    why = report.short_pieces["why"]
    assert report.short_pieces["made"] == 0 and ("no network" in why or "not used by this run" in why)
    assert "none (" in "\n".join(report.summary_lines())
    with pytest.raises(ModelError, match="no network"):  # a share was asked for: the recogniser must load
        prepare_dataset(_demo_cfg(short_clips=0.1), tmp_path / "out", normalizer=NORMALIZE, progress=False,
                        piece_maker=ShortPieceMaker(IngestConfig(), _no_recognizer))


def test_the_pipeline_makes_pieces_only_in_a_run_that_hears_its_data(tmp_path):
    from xtts_ft.pipeline import prepare_stage

    def prepared(*changes: str) -> dict:
        cfg = load_config(REPO_ROOT / "configs" / "demo.yaml",
                          [f"run.output_dir={tmp_path / 'run'}", f"dataset.path={DEMO}", f"asr.model={SMALL_MODEL_DIR}",
                           "dataset.num_workers=1", *changes])
        data_dir = prepare_stage(cfg, None)
        return json.loads((data_dir / "report.json").read_text(encoding="utf-8"))["short_pieces"]

    heard = prepared()  # the demo's evaluation hears its samples with the small recogniser: auto uses it
    assert heard["made"] >= 1 and heard["made"] == heard["wanted"]
    deaf = prepared("evaluation.recognize=false")  # nothing else loads a recogniser: auto downloads none
    assert deaf["made"] == 0 and "asr.model is not used by this run" in deaf["why"]
