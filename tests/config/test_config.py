"""Config schema: every problem reported in one error, one line each, naming file and key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO_ROOT
from xtts_ft.config import Config, config_from_dict, dump_config, load_config, parse_override
from xtts_ft.errors import ConfigError


def write(tmp_path: Path, data: dict, name: str = "run.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    return p


@pytest.fixture
def dataset_dir(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    d.mkdir()
    return d


def test_minimal_config_gets_documented_defaults(tmp_path, dataset_dir):
    cfg = load_config(write(tmp_path, {"dataset": {"path": str(dataset_dir)}}))
    assert cfg.training.lr == 5e-6
    assert cfg.precision.init_scale == 1024.0
    assert cfg.training.betas == [0.9, 0.96]
    assert cfg.checkpoint.resume == "auto"


def test_every_problem_in_one_error_with_did_you_mean(tmp_path, dataset_dir):
    path = write(
        tmp_path,
        {
            "dataset": {"path": str(dataset_dir)},
            "trainig": {},
            "training": {"lerning_rate": 1, "batch_size": "big", "max_steps": 0},
            "precision": {"mode": "fp8"},
        },
    )
    with pytest.raises(ConfigError) as err:
        load_config(path)
    lines = str(err.value).splitlines()
    assert all(line.startswith(str(path)) for line in lines)
    text = str(err.value)
    assert "trainig: unknown section (did you mean 'training'?)" in text
    assert "training.lerning_rate: unknown key" in text
    assert "training.batch_size: expected int | 'auto', got 'big'" in text
    assert "training.max_steps: must be >= 1" in text
    assert "precision.mode: expected 'auto' | 'bf16' | 'fp16' | 'fp32', got 'fp8'" in text
    assert len(lines) == 5


def test_missing_dataset_and_files_are_named(tmp_path):
    (tmp_path / "no_text").mkdir()
    extra = ["x.txt", str(tmp_path / "no_text")]
    path = write(tmp_path, {"dataset": {"path": str(tmp_path / "nope")}, "tokenizer": {"extra_text_files": extra}})
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert f"dataset.path: folder '{tmp_path / 'nope'}' does not exist" in str(err.value)
    assert "tokenizer.extra_text_files: file 'x.txt' does not exist" in str(err.value)
    assert f"tokenizer.extra_text_files: folder '{tmp_path / 'no_text'}' holds no .txt file" in str(err.value)


def test_int_is_accepted_for_float_and_bool_is_not_int(tmp_path, dataset_dir):
    with pytest.raises(ConfigError, match="training.max_steps: expected int, got True"):
        load_config(write(tmp_path, {"dataset": {"path": str(dataset_dir)}, "training": {"max_steps": True}}))
    cfg = load_config(write(tmp_path, {"dataset": {"path": str(dataset_dir)}, "precision": {"init_scale": 512}}))
    assert cfg.precision.init_scale == 512.0 and isinstance(cfg.precision.init_scale, float)


def test_set_overrides_are_typed_and_validated(tmp_path, dataset_dir):
    path = write(tmp_path, {"dataset": {"path": str(dataset_dir)}})
    cfg = load_config(path, ["training.lr=1e-5", "training.batch_size=auto", "run.language=amh"])
    assert cfg.training.lr == 1e-5
    assert cfg.training.batch_size == "auto"
    assert cfg.run.language == "am"  # alias stored as one code
    with pytest.raises(ConfigError, match="^--set training.grad_clip=high: expected float, got 'high'$"):
        load_config(path, ["training.grad_clip=high"])
    with pytest.raises(ConfigError, match="expected key.sub=value"):
        parse_override("training.lr")


def test_a_missing_recogniser_folder_is_found_with_the_other_checks_when_the_run_loads_it(tmp_path, dataset_dir):
    """Not after prepare and the tokenizer ran (28 s in): a run's config check names it, with why the run needs it."""
    path = write(tmp_path, {"dataset": {"path": str(dataset_dir)}, "asr": {"model": str(tmp_path / "no_asr")}})
    with pytest.raises(ConfigError) as err:
        load_config(path, run_checks=True)
    assert str(err.value) == (f"{path}: asr.model: folder '{tmp_path / 'no_asr'}' does not exist; point it at a "
                              f"transformers CTC model folder or a repo id such as "
                              f"agkphysics/wav2vec2-large-xlsr-53-amharic (this run loads it for evaluation.recognize)")
    with pytest.raises(ConfigError, match=r"^--set asr.model=./no_asr: folder './no_asr' does not exist; .*loads it "
                                          r"for dataset.transcript_check\)$"):
        load_config(path, ["evaluation.recognize=false", "dataset.transcript_check=0.5", "asr.model=./no_asr"],
                    run_checks=True)
    load_config(path, ["evaluation.recognize=false"], run_checks=True)  # a run that never loads it
    load_config(path)  # prepare and transcribe --model read the config without a run's checks
    load_config(path, ["asr.model=owner/some-ctc-model"], run_checks=True)  # a repo id: fetched when it is used


def test_a_mistake_is_named_after_where_it_was_made_the_file_or_the_command_line(tmp_path, dataset_dir):
    """A --set value is not in the file: its problem names the option as typed; the file's own keep the file."""
    path = write(tmp_path, {"dataset": [{"path": str(dataset_dir)}, {"path": str(dataset_dir), "language": "en",
                                                                      "format": "coqui"}],
                            "training": {"batch_size": 0}})
    with pytest.raises(ConfigError) as err:
        load_config(path, ["training.lr=fast", "evaluation={temperature: 0}", "dataset.1.path=/nowhere",
                           "training.lrr=1", "checkpoint.resume=/tmp"], given_as={"checkpoint.resume=/tmp": "--resume /tmp"})
    assert str(err.value).splitlines() == [
        "--set dataset.1.path=/nowhere: folder '/nowhere' does not exist",
        "--set training.lr=fast: expected float, got 'fast'",
        "--set training.lrr=1: unknown key (did you mean 'lr'?)",
        f"{path}: training.batch_size: must be >= 1 or 'auto'",
        "--resume /tmp: '/tmp' is not a checkpoint folder (it has no meta.json); use auto, never, or a folder like "
        "<run.output_dir>/checkpoints/step_001000",
        "--set evaluation={temperature: 0}: evaluation.temperature: 0.0 must be in (0, 5]",
    ]


def test_bad_yaml_and_missing_file_are_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("run:\n  seed: [1, 2\n", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_config(bad)
    assert "is not valid YAML" in str(err.value) and len(str(err.value).splitlines()) == 1
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "missing.yaml")


def test_yaml_is_loaded_safely(tmp_path):
    evil = tmp_path / "evil.yaml"
    evil.write_text("run: !!python/object/apply:os.system ['echo pwned']\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="tag '!!python/object/apply:os.system' is not allowed"):
        load_config(evil)


def test_resolved_config_round_trips(tmp_path, dataset_dir):
    cfg = load_config(write(tmp_path, {"dataset": {"path": str(dataset_dir)}, "training": {"lr": 2e-5}}))
    out = tmp_path / "resolved.yaml"
    dump_config(cfg, out)
    again = load_config(out)
    assert again == cfg


@pytest.mark.parametrize("path", sorted((REPO_ROOT / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_yaml_loads_and_names_its_command(path, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)
    first = path.read_text(encoding="utf-8").splitlines()[0]
    assert first == f"# python headless_train.py --config configs/{path.name}"
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    # A shipped config may name a dataset the user has not copied yet; everything else must hold.
    for i, entry in enumerate(raw["dataset"] if isinstance(raw["dataset"], list) else [raw["dataset"]]):
        # distinct stand-in folders (one dataset may not be listed twice)
        stand_in = [REPO_ROOT, REPO_ROOT / "xtts_ft", REPO_ROOT / "tests"][i]
        entry["path"] = entry["path"] if Path(entry["path"]).is_dir() else str(stand_in)
    cfg = config_from_dict(raw, str(path))
    assert isinstance(cfg, Config)


# --- dataset lists -------------------------------------------------------------------------------


def test_dataset_list_with_languages_round_trips(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    cfg = load_config(write(tmp_path, {"dataset": [{"path": str(a), "language": "amh"},
                                                   {"path": str(b), "language": "en", "speaker_name": "en_reader"}]}))
    assert [d.path for d in cfg.datasets] == [str(a), str(b)] and cfg.dataset.path == str(a)
    assert [cfg.dataset_language(d) for d in cfg.datasets] == ["am", "en"]
    assert cfg.datasets[1].speaker_name == "en_reader" and cfg.datasets[1].eval_fraction == 0.05  # own defaults
    out = tmp_path / "resolved.yaml"
    dump_config(cfg, out)
    assert isinstance(yaml.safe_load(out.read_text(encoding="utf-8"))["dataset"], list)
    assert load_config(out) == cfg


def test_single_mapping_is_one_dataset_and_dumps_as_a_mapping(tmp_path, dataset_dir):
    cfg = load_config(write(tmp_path, {"dataset": {"path": str(dataset_dir)}}))
    assert cfg.datasets == [cfg.dataset] and cfg.dataset_language(cfg.dataset) == "am"
    out = tmp_path / "resolved.yaml"
    dump_config(cfg, out)
    raw = yaml.safe_load(out.read_text(encoding="utf-8"))
    assert isinstance(raw["dataset"], dict) and "more_datasets" not in raw


def test_bad_list_entries_are_all_named_by_position(tmp_path, dataset_dir):
    path = write(tmp_path, {"dataset": [
        {"path": str(dataset_dir)},
        {"path": str(tmp_path / "nope"), "language": "xx", "fromat": "hf"},
        {"path": str(dataset_dir)},
        {"path": str(dataset_dir), "format": "ljspeech", "language": "en", "transcript_check": 0.5},
        "just a string",
    ]})
    with pytest.raises(ConfigError) as err:
        load_config(path)
    lines = str(err.value).splitlines()
    assert all(line.startswith(f"{path}: ") for line in lines)
    text = "\n".join(lines)
    assert "dataset[1].fromat: unknown key (did you mean 'format'?)" in text
    assert "dataset[1].path: folder" in text and "does not exist" in text
    assert "dataset[1].language: 'xx' is neither am nor an XTTS-v2 language" in text
    assert "dataset[2].path:" in text and "already dataset[0]" in text
    assert "dataset[3].transcript_check: the recogniser (asr.model) hears am, not 'en'" in text
    assert "dataset[4]: expected a mapping of keys" in text


def test_a_run_needs_a_dataset_in_its_own_language(tmp_path, dataset_dir):
    with pytest.raises(ConfigError, match=r"dataset.language: no dataset is in run.language 'am'"):
        load_config(write(tmp_path, {"dataset": {"path": str(dataset_dir), "language": "en"}}))
    with pytest.raises(ConfigError, match=r"dataset: the list is empty"):
        load_config(write(tmp_path, {"dataset": []}))


def test_set_overrides_with_a_dataset_list(tmp_path, dataset_dir):
    other = tmp_path / "other"
    other.mkdir()
    path = write(tmp_path, {"dataset": [{"path": str(dataset_dir)},
                                        {"path": str(dataset_dir / "x"), "language": "en"}]})
    cfg = load_config(path, [f"dataset.1.path={other}", "dataset.0.eval_fraction=0.2"])
    assert cfg.datasets[1].path == str(other) and cfg.dataset.eval_fraction == 0.2
    with pytest.raises(ConfigError, match=r"--set dataset.path=/x: dataset is a list of 2 datasets .*dataset.0.path"):
        load_config(path, ["dataset.path=/x"])
    with pytest.raises(ConfigError, match=r"dataset 2 is out of range: this config lists 2 datasets, numbered 0-1"):
        load_config(path, ["dataset.2.path=/x"])


def test_set_dataset_path_still_works_on_a_single_mapping(tmp_path, dataset_dir):
    other = tmp_path / "other"
    other.mkdir()
    cfg = load_config(write(tmp_path, {"dataset": {"path": str(dataset_dir)}}), [f"dataset.path={other}"])
    assert cfg.dataset.path == str(other) and len(cfg.datasets) == 1


def test_hf_path_may_be_a_hub_id_or_a_file(tmp_path):
    parquet = tmp_path / "train.parquet"
    parquet.write_bytes(b"")
    for source in ("google/fleurs", str(parquet)):
        cfg = config_from_dict({"dataset": {"path": source, "format": "hf", "text_column": "transcription"}})
        assert cfg.dataset.path == source
    with pytest.raises(ConfigError, match="neither a local parquet/arrow file or folder nor a Hugging Face dataset id"):
        config_from_dict({"dataset": {"path": "./missing.parquet", "format": "hf"}})


def test_a_cer_best_metric_needs_the_recogniser(tmp_path):
    """checkpoint.best_metric cer is scored by the recogniser: without evaluation.recognize the run is refused."""
    with pytest.raises(ConfigError, match="checkpoint.best_metric"):
        config_from_dict({"checkpoint": {"best_metric": "cer"}, "evaluation": {"recognize": False}})
    with pytest.raises(ConfigError, match="best_metric"):
        config_from_dict({"checkpoint": {"best_metric": "wer"}})
    # tail_rate: the samples must be listened to (and heard: the text is aligned by the recogniser)
    tail = {"checkpoint": {"best_metric": "tail_rate"}, "dataset": {"path": str(tmp_path)}}
    assert config_from_dict(tail).checkpoint.best_metric == "tail_rate"
    with pytest.raises(ConfigError, match="'tail_rate' needs the samples listened to"):
        config_from_dict({"checkpoint": {"best_metric": "tail_rate"}, "evaluation": {"quality": False}})
    with pytest.raises(ConfigError, match="early_stopping.metric: 'tail_rate' needs the samples listened to"):
        config_from_dict({"training": {"early_stopping": {"enabled": True, "metric": "tail_rate"}},
                          "evaluation": {"quality": False, "every_steps": 10}})


def test_a_bare_config_name_is_found_in_the_project_configs(tmp_path, monkeypatch, caplog):
    from xtts_ft.config.loading import locate_config

    shipped = tmp_path / "project" / "configs"
    shipped.mkdir(parents=True)
    (shipped / "amharic.yaml").write_text("run: {}\n", encoding="utf-8")
    here = tmp_path / "elsewhere"
    here.mkdir()
    monkeypatch.chdir(here)
    with caplog.at_level("INFO", logger="xtts_ft.config.loading"):
        assert locate_config("amharic.yaml", shipped) == shipped / "amharic.yaml"
    assert [r.getMessage() for r in caplog.records] == [
        f"--config amharic.yaml: not in {here}; using {shipped / 'amharic.yaml'}"]
    (here / "amharic.yaml").write_text("run: {}\n", encoding="utf-8")  # the user's own file always wins
    assert locate_config("amharic.yaml", shipped) == Path("amharic.yaml")
    for missing in ("other.yaml", "sub/amharic.yaml"):  # only a bare name is looked up in configs/
        with pytest.raises(ConfigError, match="config file not found"):
            locate_config(missing, shipped)


def test_training_compile_reads_yaml_on_off_and_needs_the_fast_forward(tmp_path, dataset_dir, caplog):
    """YAML 1.1 reads a bare on/off as true/false: the config holds the setting's own word again (and the log says
    ``off``, not ``False``); compiling coqui's forward is refused."""
    import torch

    from xtts_ft.train.session import block_runner

    base = {"dataset": {"path": str(dataset_dir)}}
    path = tmp_path / "run.yaml"
    path.write_text(f"dataset: {{path: {dataset_dir}}}\ntraining: {{compile: off}}\n", encoding="utf-8")
    cfg = load_config(path)
    assert cfg.training.compile == "off"
    with caplog.at_level("INFO", logger="xtts_ft.train.session"):
        assert block_runner(cfg.training, None, torch.device("cpu")) is None  # off: nothing compiled, no GPT needed
    assert caplog.messages == ["training forward: fast, GPT blocks not compiled (training.compile: off)"]
    assert load_config(write(tmp_path, base), ["training.compile=on"]).training.compile == "on"
    assert load_config(write(tmp_path, base), ["training.compile=true"]).training.compile == "on"
    assert load_config(write(tmp_path, {**base, "training": {"compile": "auto"}})).training.compile == "auto"
    with pytest.raises(ConfigError, match="training.compile: on needs training.gpt_forward: fast"):
        load_config(write(tmp_path, {**base, "training": {"compile": "on", "gpt_forward": "coqui"}}))
    with pytest.raises(ConfigError, match="training.gpt_forward"):
        load_config(write(tmp_path, {**base, "training": {"gpt_forward": "quick"}}))
