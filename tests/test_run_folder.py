"""A run folder belongs to one run: claiming it refuses to mix runs, names what differs, and never deletes.

These tests use checkpoint folders with only a ``meta.json`` (all ``claim_run_folder`` reads); the
trainer's own use of the run id (retention, latest, best) is in tests/reliability/test_two_runs.py.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from xtts_ft.checkpoint_store import CheckpointRecord
from xtts_ft.config import Config, with_changes
from xtts_ft.errors import RunFolderError
from xtts_ft.run_folder import OLD_RUNS, claim_run_folder, describe_differences, read_record, run_fingerprint


def make_dataset(root: Path) -> Path:
    (root / "wavs").mkdir(parents=True)
    for i in range(3):
        (root / "wavs" / f"a{i}.wav").write_bytes(b"RIFF" + bytes(100 + i))
    (root / "metadata.csv").write_text("audio_file|text|speaker_name\nwavs/a0.wav|ሰላም|s\nwavs/a1.wav|ለዓለም|s\n",
                                       encoding="utf-8")
    return root


def make_cfg(tmp_path: Path, dataset: Path, **tokenizer) -> Config:
    return with_changes(Config(), run={"output_dir": str(tmp_path / "run")}, dataset={"path": str(dataset)},
                        tokenizer=tokenizer)


def fake_checkpoint(run_dir: Path, step: int, run_id) -> Path:
    path = run_dir / "checkpoints" / f"step_{step:06d}"
    path.mkdir(parents=True)
    meta = {"step": step, "training_state_sha256": "0" * 64}
    if run_id is not None:
        meta["run_id"] = run_id
    (path / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    return path


@pytest.fixture
def setup(tmp_path):
    dataset = make_dataset(tmp_path / "data_in")
    cfg = make_cfg(tmp_path, dataset)
    first = claim_run_folder(cfg.run_dir, fingerprint=run_fingerprint(cfg), resume="auto")
    fake_checkpoint(cfg.run_dir, 10, first.run_id)
    fake_checkpoint(cfg.run_dir, 20, first.run_id)
    (cfg.run_dir / "data").mkdir()
    (cfg.run_dir / "data" / "metadata_train.csv").write_text("prepared", encoding="utf-8")
    (cfg.run_dir / "metrics.jsonl").write_text("{}\n", encoding="utf-8")
    return cfg, dataset, first


def test_the_same_run_continues_with_the_same_id(setup):
    cfg, _, first = setup
    again = claim_run_folder(cfg.run_dir, fingerprint=run_fingerprint(cfg), resume="auto")
    assert again.run_id == first.run_id and read_record(cfg.run_dir).run_id == first.run_id


def test_changed_transcripts_are_refused_before_anything_is_touched(setup):
    cfg, dataset, first = setup
    text = (dataset / "metadata.csv").read_text(encoding="utf-8")
    (dataset / "metadata.csv").write_text(text.replace("ሰላም", "ሰላም ሰላም"), encoding="utf-8")
    before = sorted(p.relative_to(cfg.run_dir).as_posix() for p in cfg.run_dir.rglob("*"))
    with pytest.raises(RunFolderError) as err:
        claim_run_folder(cfg.run_dir, fingerprint=run_fingerprint(cfg), resume="auto")
    msg = str(err.value)
    assert len(msg.splitlines()) == 1
    assert msg.startswith(f"{cfg.run_dir}: holds run {first.run_id} (2 checkpoint(s), latest step_000020) and this "
                          f"command would start another run there: the dataset's transcripts changed: 1 edited "
                          f"(metadata.csv).")
    assert "run.output_dir" in msg and "--archive-old-run" in msg and "nothing is deleted" in msg
    assert sorted(p.relative_to(cfg.run_dir).as_posix() for p in cfg.run_dir.rglob("*")) == before


def test_other_settings_are_named(setup, tmp_path):
    cfg, dataset, _ = setup
    other = with_changes(make_cfg(tmp_path, dataset, new_tokens=600), text={"fold_homophones": False})
    before = run_fingerprint(cfg)
    (dataset / "wavs" / "a9.wav").write_bytes(b"RIFF")  # a clip's audio only once the metadata names it
    assert describe_differences(before, run_fingerprint(cfg)) == []
    with open(dataset / "metadata.csv", "a", encoding="utf-8") as f:
        f.write("wavs/a9.wav|ሌላ|s\n")
    diffs = describe_differences(before, run_fingerprint(other))
    assert diffs == ["the dataset's transcripts changed: 1 edited (metadata.csv)",
                     "the dataset's audio files changed: 1 added (wavs/a9.wav)",
                     "text.fold_homophones: true -> false", "tokenizer.new_tokens: 2000 -> 600"]


def test_archive_moves_the_old_run_aside_and_deletes_nothing(setup):
    cfg, dataset, first = setup
    (dataset / "metadata.csv").write_text("audio_file|text|speaker_name\nwavs/a2.wav|ሌላ|s\n", encoding="utf-8")
    new = claim_run_folder(cfg.run_dir, fingerprint=run_fingerprint(cfg), resume="auto", archive=True)
    assert new.run_id != first.run_id and read_record(cfg.run_dir).run_id == new.run_id
    (old,) = list((cfg.run_dir / OLD_RUNS).iterdir())
    assert old.name.endswith("_" + first.run_id)
    assert sorted(p.name for p in (old / "checkpoints").iterdir()) == ["step_000010", "step_000020"]
    assert (old / "data" / "metadata_train.csv").read_text(encoding="utf-8") == "prepared"  # inputs changed: moved
    assert json.loads((old / "run.json").read_text(encoding="utf-8"))["run_id"] == first.run_id
    assert (old / "metrics.jsonl").is_file() and not (cfg.run_dir / "metrics.jsonl").exists()
    assert not (cfg.run_dir / "checkpoints").exists()


def test_resume_never_next_to_checkpoints_is_refused_and_archive_keeps_the_prepared_data(setup):
    cfg, _, first = setup
    with pytest.raises(RunFolderError, match="checkpoint.resume: never starts a new run"):
        claim_run_folder(cfg.run_dir, fingerprint=run_fingerprint(cfg), resume="never")
    new = claim_run_folder(cfg.run_dir, fingerprint=run_fingerprint(cfg), resume="never", archive=True)
    assert new.run_id != first.run_id
    (old,) = list((cfg.run_dir / OLD_RUNS).iterdir())
    assert len(list((old / "checkpoints").iterdir())) == 2
    assert (cfg.run_dir / "data" / "metadata_train.csv").is_file()  # same inputs: the prepared data is reused
    # the trainer's own claim (no fingerprint) right after keeps the new run
    assert claim_run_folder(cfg.run_dir, fingerprint=None, resume="never").run_id == new.run_id


def test_a_checkpoint_of_another_run_named_for_resume_is_refused(setup, tmp_path):
    cfg, _, _ = setup
    foreign = fake_checkpoint(tmp_path / "elsewhere", 5, "20260101-000000-abcdef")
    with pytest.raises(RunFolderError, match="checkpoint.resume names a checkpoint of run 20260101-000000-abcdef"):
        claim_run_folder(cfg.run_dir, fingerprint=run_fingerprint(cfg), resume=str(foreign))


def test_a_new_folder_started_from_another_runs_checkpoint_continues_that_run(tmp_path):
    foreign = fake_checkpoint(tmp_path / "elsewhere", 5, "20260101-000000-abcdef")
    record = claim_run_folder(tmp_path / "new", fingerprint=None, resume=str(foreign))
    assert record.run_id == "20260101-000000-abcdef"


def test_a_folder_from_before_run_records_is_adopted(tmp_path):
    run = tmp_path / "run"
    legacy = fake_checkpoint(run, 4, None)
    record = claim_run_folder(run, fingerprint=None, resume="auto")
    assert record.adopted and record.owns(CheckpointRecord.read(legacy)) and record.owns(None)
    assert not record.owns(dataclasses.replace(CheckpointRecord.read(legacy), run_id="someone-else"))


def test_a_run_that_saved_nothing_gives_way_without_a_question(tmp_path):
    dataset = make_dataset(tmp_path / "data_in")
    cfg = make_cfg(tmp_path, dataset)
    first = claim_run_folder(cfg.run_dir, fingerprint=run_fingerprint(cfg), resume="auto")
    other = make_cfg(tmp_path, dataset, new_tokens=900)
    second = claim_run_folder(other.run_dir, fingerprint=run_fingerprint(other), resume="auto")
    assert second.run_id != first.run_id and not (cfg.run_dir / OLD_RUNS).exists()


def test_fingerprint_covers_every_dataset_of_a_list(tmp_path):
    from xtts_ft.config import DatasetConfig

    first, second = make_dataset(tmp_path / "am"), make_dataset(tmp_path / "en")
    cfg = make_cfg(tmp_path, first)
    single = run_fingerprint(cfg)
    assert "more_datasets" not in single  # a one-dataset run keeps the fingerprint it always had
    cfg = dataclasses.replace(cfg, more_datasets=[DatasetConfig(path=str(second), language="en")])
    mixed = run_fingerprint(cfg)
    assert any("datasets after the first" in d and "1 -> 2 datasets" in d for d in describe_differences(single, mixed))
    (second / "metadata.csv").write_text("audio_file|text|speaker_name\nwavs/a0.wav|hello|s\n", encoding="utf-8")
    assert any("datasets after the first" in d for d in describe_differences(mixed, run_fingerprint(cfg)))
    cfg = dataclasses.replace(cfg, more_datasets=[dataclasses.replace(cfg.more_datasets[0], language="fr")])
    assert run_fingerprint(cfg)["more_datasets"][0]["language"] == "fr"


def test_fingerprint_of_hf_sources(tmp_path):
    from xtts_ft.config import DatasetConfig
    from xtts_ft.run_folder import source_fingerprint

    parquet = tmp_path / "train.parquet"
    parquet.write_bytes(b"PAR1" + bytes(10))
    assert source_fingerprint(DatasetConfig(path=str(parquet), format="hf"))["audio"] == {"train.parquet": 14}
    hub = source_fingerprint(DatasetConfig(path="google/fleurs", format="hf", hf_name="am_et", hf_split="test"))
    other = source_fingerprint(DatasetConfig(path="google/fleurs", format="hf", hf_name="am_et", hf_split="train"))
    assert hub["hub"] == "google/fleurs/am_et:test@None"
    assert describe_differences({"dataset": hub}, {"dataset": other}) == [
        "the Hub dataset changed: google/fleurs/am_et:test@None -> google/fleurs/am_et:train@None"]


def test_reports_and_stray_files_do_not_define_the_data(setup):
    """A second identical ingest changes only its report's timing; notes and unnamed files are not clips."""
    cfg, dataset, first = setup
    (dataset / "ingest_report.json").write_text('{"seconds": 12.5}', encoding="utf-8")
    (dataset / "ingest_report.md").write_text("took 12.5 s", encoding="utf-8")
    (dataset / "segments.tsv").write_text("a\t0.0\t1.0\n", encoding="utf-8")
    assert claim_run_folder(cfg.run_dir, fingerprint=run_fingerprint(cfg), resume="auto").run_id == first.run_id
    (dataset / "ingest_report.json").write_text('{"seconds": 13.1}', encoding="utf-8")  # the same ingest, again
    (dataset / "notes.txt").write_text("recorded on Tuesday", encoding="utf-8")
    (dataset / "wavs" / "unused.wav").write_bytes(b"RIFF")
    assert claim_run_folder(cfg.run_dir, fingerprint=run_fingerprint(cfg), resume="auto").run_id == first.run_id


def test_a_record_listing_every_file_is_compared_on_the_clips_and_upgraded(setup):
    """run.json written before the fingerprint knew clips listed every file: reports there refuse nothing."""
    cfg, dataset, first = setup
    record = json.loads((cfg.run_dir / "run.json").read_text(encoding="utf-8"))
    legacy = record["fingerprint"]["dataset"]
    del legacy["defining_only"]
    legacy["transcripts"]["ingest_report.json"] = "0" * 16  # the timing of an earlier ingest
    legacy["audio"]["wavs/a2.wav"] = 102  # on disk, named by no clip
    (cfg.run_dir / "run.json").write_text(json.dumps(record), encoding="utf-8")
    assert claim_run_folder(cfg.run_dir, fingerprint=run_fingerprint(cfg), resume="auto").run_id == first.run_id
    assert read_record(cfg.run_dir).fingerprint["dataset"] == run_fingerprint(cfg)["dataset"]  # precise from now on


def test_changed_data_can_continue_the_same_run_when_asked(setup):
    cfg, dataset, first = setup
    with open(dataset / "metadata.csv", "a", encoding="utf-8") as f:
        f.write("wavs/a2.wav|ሌላ ቃል|s\n")
    with pytest.raises(RunFolderError) as err:
        claim_run_folder(cfg.run_dir, fingerprint=run_fingerprint(cfg), resume="auto")
    msg = str(err.value)
    assert "the dataset's transcripts changed: 1 edited (metadata.csv)" in msg
    assert "the dataset's audio files changed: 1 added (wavs/a2.wav)" in msg
    assert f"or add --continue-with-new-data to continue run {first.run_id} on the changed data" in msg
    again = claim_run_folder(cfg.run_dir, fingerprint=run_fingerprint(cfg), resume="auto", new_data=True)
    assert again.run_id == first.run_id and not (cfg.run_dir / OLD_RUNS).exists()
    assert sorted(p.name for p in (cfg.run_dir / "checkpoints").iterdir()) == ["step_000010", "step_000020"]
    events = [json.loads(line) for line in (cfg.run_dir / "events.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [e["event"] for e in events] == ["data_changed"] and "metadata.csv" in events[0]["changes"][0]
    # recorded: the next command without the option continues too
    assert claim_run_folder(cfg.run_dir, fingerprint=run_fingerprint(cfg), resume="auto").run_id == first.run_id


def test_continue_with_new_data_does_not_cover_other_settings(setup, tmp_path):
    cfg, dataset, _ = setup
    with open(dataset / "metadata.csv", "a", encoding="utf-8") as f:
        f.write("wavs/a2.wav|ሌላ ቃል|s\n")
    other = make_cfg(tmp_path, dataset, new_tokens=600)
    with pytest.raises(RunFolderError) as err:
        claim_run_folder(other.run_dir, fingerprint=run_fingerprint(other), resume="auto", new_data=True)
    assert "tokenizer.new_tokens: 2000 -> 600" in str(err.value) and "--continue-with-new-data" not in str(err.value)


def test_continuing_on_new_data_keeps_the_runs_vocabulary(tmp_path, tiny_base_dir):
    """The tokenizer stage with --continue-with-new-data: the checkpoints' token ids keep their meaning."""
    from xtts_ft.base_model import BaseModelFiles
    from xtts_ft.pipeline import tokenizer_stage
    from xtts_ft.tokenizer import vocab_fingerprint

    cfg = make_cfg(tmp_path, tmp_path, new_tokens=600, min_frequency=1)
    data = cfg.run_dir / "data"
    (data / "wavs").mkdir(parents=True)
    for i in range(6):
        (data / "wavs" / f"a{i}.wav").write_bytes(b"RIFF")  # the tokenizer reads the transcripts only

    def write_data(words: str) -> None:
        for name in ("metadata_train.csv", "metadata_eval.csv"):
            rows = [f"wavs/a{i}.wav|{words} {i}|s" for i in range(6)]
            (data / name).write_text("audio_file|text|speaker_name\n" + "\n".join(rows) + "\n", encoding="utf-8")

    base = BaseModelFiles.from_dir(tiny_base_dir)
    write_data("ሰላም ለዓለም")
    first = vocab_fingerprint(tokenizer_stage(cfg, base, data))
    write_data("መልካም ቀን ነው")  # the data changed
    kept = tokenizer_stage(cfg, base, data, keep_existing=True)
    assert vocab_fingerprint(kept) == first
    assert vocab_fingerprint(tokenizer_stage(cfg, base, data)) == first  # recorded: reused without the option too
    write_data("ሌላ ጽሑፍ እዚህ")
    assert vocab_fingerprint(tokenizer_stage(cfg, base, data)) != first  # without it, changed data builds anew


def test_recorded_fingerprints_and_stage_hashes_keep_their_meaning(setup, tmp_path):
    """run.json and .stage.json share xtts_ft.input_hash now; the values they record are the ones written before."""
    import hashlib

    from xtts_ft import stages

    cfg, dataset, _ = setup
    text = tmp_path / "extra.txt"
    text.write_text("ሰላም ለዓለም\n", encoding="utf-8")
    cfg = with_changes(cfg, tokenizer={"extra_text_files": [str(text)]})
    fingerprint = run_fingerprint(cfg)
    old_sha = lambda data: hashlib.sha256(data).hexdigest()[:16]  # noqa: E731 - the scheme run.json was written with
    assert fingerprint["dataset"]["transcripts"] == {"metadata.csv": old_sha((dataset / "metadata.csv").read_bytes())}
    assert fingerprint["tokenizer"]["extra_text_files"] == old_sha(old_sha(text.read_bytes()).encode())
    parts = ({"lr": 1e-5}, [("a.wav", 10, 5)], "am")
    old_stage = hashlib.sha256(json.dumps(parts, sort_keys=True, default=str, ensure_ascii=False).encode()).hexdigest()
    assert stages.hash_inputs(*parts) == old_stage  # an older .stage.json still says "unchanged"
