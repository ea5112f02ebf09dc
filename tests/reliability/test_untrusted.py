"""Untrusted files: nothing a user downloads can make the project run code by being read.

The payload is a real one: a pickle whose ``__reduce__`` calls ``os.system("touch <marker>")``. A
control test shows it creates the marker when loaded the unsafe way; every other test places it
where the project reads weights (a checkpoint's training_state.pt with a matching checksum, so
only ``weights_only=True`` stands in the way; a base model's model.pth, dvae.pth, mel_stats.pth;
speakers_xtts.pth of a base model or an export; an export's model.pth) and checks the refusal is
one line naming the file and that the marker does not exist. YAML python tags are refused, and
dataset entries that leave the dataset folder are rejected as ``outside_root``.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from pathlib import Path

import pytest
import torch

from tests.reliability.relhelpers import copy_run, write_wav
from xtts_ft.base_model import BaseModelFiles
from xtts_ft.checkpoint_store import CheckpointStore, file_sha256
from xtts_ft.config import load_config
from xtts_ft.errors import CheckpointError, ConfigError, ModelError
from xtts_ft.evaluate.export import export_from_checkpoint
from xtts_ft.evaluate.infer import synthesize_command
from xtts_ft.inference.checkpoint_folder import load_checkpoint_gpt_state
from xtts_ft.model import build_training_model
from xtts_ft.text_settings import make_normalizer
from xtts_ft.train.resume import choose_checkpoint

REFUSAL = ("refused to load: it would import and call 'posix.system'; files are read as plain weights only, so "
           "nothing in it was run. Use the official file, or re-save the weights as a plain state dict")


class RunsCode:
    """Unpickling this calls os.system: what a booby-trapped .pth does."""

    def __init__(self, marker: Path):
        self.command = f"touch {shlex.quote(str(marker))}"

    def __reduce__(self):
        return (os.system, (self.command,))


@pytest.fixture
def marker(tmp_path) -> Path:
    path = tmp_path / "code_ran"
    yield path
    assert not path.exists(), "a file that was only meant to be read ran code"


def plant(path: Path, marker: Path, wrap: str | None = None) -> Path:
    """Write the payload to ``path`` (inside a dict under ``wrap``, like a real state file)."""
    payload = RunsCode(marker)
    torch.save({wrap: payload} if wrap else payload, path)
    return path


def test_the_payload_really_runs_code_when_loaded_unsafely(tmp_path):
    control = tmp_path / "control_marker"
    plant(tmp_path / "evil.pth", control, wrap="model")
    torch.load(tmp_path / "evil.pth", weights_only=False)  # what a plain torch.load of old did
    assert control.exists()


def test_a_checkpoint_with_a_matching_checksum_is_still_refused(trained_run, tmp_path, marker):
    run = copy_run(trained_run, tmp_path / "run")
    latest = run / "checkpoints" / "step_000004"
    state = plant(latest / "training_state.pt", marker, wrap="gpt")
    meta = json.loads((latest / "meta.json").read_text(encoding="utf-8"))
    meta["training_state_sha256"] = file_sha256(state)
    (latest / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    assert CheckpointStore.verify(latest)  # the checksum passes: only weights_only stops it

    for load in (CheckpointStore.load_state, load_checkpoint_gpt_state):  # resume, then export / synthesize
        with pytest.raises(CheckpointError) as err:
            load(latest)
        assert str(err.value) == f"{state}: {REFUSAL}"
    assert choose_checkpoint("auto", run) == latest  # resume: auto picks it, and the load above refuses it


@pytest.mark.parametrize("name", ["model.pth", "dvae.pth", "mel_stats.pth"])
def test_a_base_model_file_that_would_run_code_is_refused(tiny_base, vocab, tokenizer, tmp_path, marker, name):
    base_dir = tmp_path / "downloaded_base"
    shutil.copytree(tiny_base.root, base_dir)
    plant(base_dir / name, marker, wrap="model" if name == "model.pth" else None)
    with pytest.raises(ModelError) as err:
        build_training_model(BaseModelFiles.from_dir(base_dir), vocab[0], tokenizer)
    assert str(err.value) == f"{base_dir / name}: {REFUSAL}"


def test_a_base_speakers_file_that_would_run_code_is_not_exported(trained_run, tiny_base, tmp_path, marker):
    base_dir = tmp_path / "downloaded_base"
    shutil.copytree(tiny_base.root, base_dir)
    plant(base_dir / "speakers_xtts.pth", marker)
    out = tmp_path / "export"
    with pytest.raises(ModelError) as err:
        export_from_checkpoint(trained_run / "checkpoints" / "step_000004", out, BaseModelFiles.from_dir(base_dir))
    assert str(err.value) == f"{base_dir / 'speakers_xtts.pth'}: {REFUSAL}"
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".export")]


@pytest.fixture(scope="module")
def export_dir(trained_run, tiny_base, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("exports") / "amharic"
    return export_from_checkpoint(trained_run / "checkpoints" / "step_000004", out, tiny_base)


@pytest.mark.parametrize("name", ["speakers_xtts.pth", "model.pth"])
def test_an_export_folder_file_that_would_run_code_is_refused(export_dir, dataset, tmp_path, marker, name):
    folder = tmp_path / "downloaded_export"
    shutil.copytree(export_dir, folder)
    plant(folder / name, marker, wrap="model" if name == "model.pth" else None)
    wav = dataset[0].parent / "wavs" / "clip_00.wav"
    with pytest.raises(ModelError) as err:
        synthesize_command(folder, "a tiny model speaks", wav, tmp_path / "out.wav", normalizer=lambda s: s, temperature=0.7)
    assert str(err.value) == f"{folder / name}: {REFUSAL}"
    assert not (tmp_path / "out.wav").exists()


def test_yaml_python_tags_are_refused(tmp_path, marker):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"run:\n  seed: !!python/object/apply:os.system ['touch {marker}']\n", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_config(cfg)
    assert str(err.value) == (f"{cfg}: line 2: tag '!!python/object/apply:os.system' is not allowed; configs are read "
                              f"with safe YAML loading (plain values only), remove the tag")


def test_a_checkpoint_config_with_a_python_tag_is_refused(trained_run, tiny_base, tmp_path, marker):
    run = copy_run(trained_run, tmp_path / "run")
    latest = run / "checkpoints" / "step_000004"
    (latest / "config.yaml").write_text(f"run: !!python/object/apply:os.system ['touch {marker}']\n", encoding="utf-8")
    with pytest.raises(CheckpointError, match=r"^.*step_000004/config.yaml: not valid YAML \(could not determine a "
                                              r"constructor for the tag 'tag:yaml.org,2002:python/object/apply:os.system'"):
        export_from_checkpoint(latest, tmp_path / "export", tiny_base)


def test_dataset_entries_outside_the_dataset_folder_are_rejected(tmp_path):
    from xtts_ft.data import prepare_command

    root, outside = tmp_path / "dataset", tmp_path / "private"
    (root / "wavs").mkdir(parents=True)
    outside.mkdir()
    for i in range(3):
        write_wav(root / "wavs" / f"ok_{i}.wav", 1.5, seed=i)
    write_wav(outside / "secret.wav", 1.5, seed=9)
    (root / "wavs" / "link.wav").symlink_to(outside / "secret.wav")
    rows = [f"wavs/ok_{i}.wav|ሰላም ለዓለም ቁጥር {i}|spk" for i in range(3)]
    rows += ["../private/secret.wav|ሚስጥር አንድ|spk", f"{outside / 'secret.wav'}|ሚስጥር ሁለት|spk", "wavs/link.wav|ሚስጥር ሶስት|spk"]
    (root / "metadata.csv").write_text("audio_file|text|speaker_name\n" + "\n".join(rows) + "\n", encoding="utf-8")

    report = prepare_command(root, tmp_path / "prepared", "coqui", num_workers=1, eval_fraction=0.0,
                             min_chars_per_second=0.0, min_snr_db=None, progress=False,  # tones: not speech
                             normalizer=make_normalizer(fold_homophones=False))
    assert report.rejected["outside_root"] == 3 and report.kept == 3
    details = sorted(e["detail"] for e in report.examples["outside_root"])
    assert details == sorted([
        "'../private/secret.wav' points outside the dataset folder",
        f"'{outside / 'secret.wav'}' points outside the dataset folder",
        f"'wavs/link.wav' is a link to '{(outside / 'secret.wav').resolve()}', outside the dataset folder",
    ])
    copied = [p.name for p in (tmp_path / "prepared" / "wavs").rglob("*") if p.is_file()]
    assert len(copied) == 3 and "secret" not in " ".join(copied)
