"""``python -m xtts_ft publish``: the folder and card from a run's records, the upload to the stand-in hub of
tests/fixtures/hub.py (real huggingface_hub client, loopback only), and one line for each way it cannot upload."""

from __future__ import annotations

import contextlib
import io
import json

import pytest
import soundfile as sf

from tests.fixtures.hub import StandInHub, serve_hub
from xtts_ft.cli import main
from xtts_ft.publish.hub import PUBLISH_RECORD

REPO = "alice/xtts-amharic"
# The run is fine-tuned from the tiny random base, not XTTS-v2: the card names no base_model (tests/publish/test_card.py)
HUB_METADATA = {"license": "other", "license_name": "coqui-public-model-license", "base_model": None,
                "language": "am", "pipeline_tag": "text-to-speech"}
EXPORT_FILES = {"model.pth", "config.json", "vocab.json", "dvae.pth", "mel_stats.pth", "xtts_ft_meta.json"}


def _cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["publish", *args])
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def dry_run(run_folder, tmp_path_factory):
    """``publish --dry-run`` of the run folder (its best checkpoint, exported into the folder)."""
    out = tmp_path_factory.mktemp("hub_upload") / "xtts-amharic"
    rc, stdout, _ = _cli("--model", str(run_folder), "--repo-id", REPO, "--dry-run", "--out", str(out))
    return rc, stdout, out


@pytest.fixture(scope="module")
def export_folder(run_folder, tiny_base_dir, tmp_path_factory):
    """What `python -m xtts_ft export` writes for the run's step 2: it names its checkpoint, so its run is found."""
    from xtts_ft.base_model import BaseModelFiles
    from xtts_ft.evaluate.export import export_from_checkpoint

    out = tmp_path_factory.mktemp("exports") / "amharic"
    return export_from_checkpoint(run_folder / "checkpoints" / "step_000002", out, BaseModelFiles.from_dir(tiny_base_dir))


@pytest.fixture
def export_only(dry_run):
    """An export folder to publish (the dry run's folder is one)."""
    return dry_run[2]


def _errors(stderr: str) -> list[str]:
    """The ``error:`` lines the CLI printed (log lines may come before them); never a traceback."""
    assert "Traceback" not in stderr
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def _files(folder) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def test_dry_run_writes_the_folder_with_the_card_of_the_best_checkpoint(dry_run, run_folder, tiny_base_dir):
    from huggingface_hub import metadata_load

    rc, stdout, out = dry_run
    assert rc == 0 and f"to {out}" in stdout and "nothing uploaded" in stdout
    samples = {f for f in _files(out) if f.startswith("samples/")}
    assert _files(out) == EXPORT_FILES | {"README.md", PUBLISH_RECORD} | samples and len(samples) == 3
    assert json.loads((out / "xtts_ft_meta.json").read_text(encoding="utf-8"))["step"] == 2  # best eval loss, not latest
    meta = metadata_load(out / "README.md")
    assert {k: meta.get(k) for k in HUB_METADATA} == HUB_METADATA
    card = (out / "README.md").read_text(encoding="utf-8")
    # step 2's evaluation record: CER mean of 2.5, 0.4, 0.3; short text CER 2.5 and stop rate 0 (it babbled)
    assert "| CER (character error rate, all samples) | 1.07 |" in card
    assert "| CER, short texts (under 20 characters) | 2.5 |" in card and "| stop rate, short texts | 0 |" in card
    assert "`agkphysics/wav2vec2-large-xlsr-53-amharic`" in card  # the recogniser that heard them (run config)
    assert "1.25 hours" in card and "120 clips" in card and "2 speaker(s)" in card  # data/report.json
    assert "| 3 |" not in card  # nothing of step 4's evaluation
    assert "hf download alice/xtts-amharic" in card and "python -m xtts_ft serve --model xtts_voice --voices voices" in card
    assert f"The base model `{tiny_base_dir.name}` fine-tuned" in card and "are XTTS-v2's" not in card
    assert "| speaker similarity (XTTS speaker encoder, sample vs. reference) | 0.81 (meaningless here, see below) |" in card
    assert str(run_folder) not in card  # a public card names no local paths, nor its metadata files
    for name in ("xtts_ft_meta.json", PUBLISH_RECORD):
        text = (out / name).read_text(encoding="utf-8")
        assert str(run_folder) not in text and str(tiny_base_dir) not in text
    record = json.loads((out / PUBLISH_RECORD).read_text(encoding="utf-8"))
    assert record["step"] == 2 and record["metrics"]["sample_cer_short"] == 2.5
    assert [s["text"] for s in record["samples"]][0] == "ሰላም"  # the short text is shown, not hidden
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # no staging folder left


def test_an_existing_folder_it_did_not_write_is_never_replaced(run_folder, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me", encoding="utf-8")
    rc, _, err = _cli("--model", str(run_folder), "--repo-id", REPO, "--dry-run", "--out", str(out))
    assert rc == 2 and len(_errors(err)) == 1 and "was not written by `publish`" in err
    assert _files(out) == {"notes.txt"}


def test_upload_to_the_hub_then_the_card_loads_from_it(export_folder, run_folder, tmp_path, monkeypatch):
    import huggingface_hub.constants
    from huggingface_hub import ModelCard, hf_hub_download

    export = export_folder
    export_meta = (export / "xtts_ft_meta.json").read_text(encoding="utf-8")
    with serve_hub({}, tokens={"hf_write": "write"}) as url:
        with monkeypatch.context() as patch:  # HF_ENDPOINT's effect; the downloads below name the endpoint
            patch.setattr(huggingface_hub.constants, "ENDPOINT", url)
            patch.setenv("HF_TOKEN", "hf_write")
            rc, stdout, err = _cli("--model", str(export), "--repo-id", REPO, "--private", "--out", str(tmp_path / "up"))
        assert rc == 0, err
        repo = StandInHub.repos[REPO]
        assert repo["private"] and set(repo["files"]) == _files(tmp_path / "up")
        assert repo["files"]["model.pth"] == (export / "model.pth").read_bytes()
        assert f"uploaded to {url}/{REPO}" in stdout
        card_path = hf_hub_download(REPO, "README.md", endpoint=url, cache_dir=str(tmp_path / "cache"))
        card = ModelCard.load(card_path)
        assert {k: card.data.to_dict().get(k) for k in HUB_METADATA} == HUB_METADATA
        first = sorted(f for f in repo["files"] if f.startswith("samples/"))[0]
        assert f'src="{url}/{REPO}/resolve/main/{first}"' in card.text  # the player's link resolves on the hub
        audio, sr = sf.read(hf_hub_download(REPO, first, endpoint=url, cache_dir=str(tmp_path / "cache")))
        assert sr == 24000 and len(audio) == 12000
    assert "| CER, short texts (under 20 characters) | 2.5 |" in card.text  # found the run through the export's record
    assert (export / "xtts_ft_meta.json").read_text(encoding="utf-8") == export_meta  # the export is untouched
    assert (tmp_path / "up" / "model.pth").stat().st_ino == (export / "model.pth").stat().st_ino  # linked, not copied


def test_an_export_away_from_its_run_says_what_is_missing(export_folder, tmp_path):
    moved = tmp_path / "moved_export"  # as if copied to another machine: its checkpoint and run are not here
    moved.mkdir()
    for f in export_folder.iterdir():
        (moved / f.name).hardlink_to(f)
    meta = json.loads((export_folder / "xtts_ft_meta.json").read_text(encoding="utf-8"))
    (moved / "xtts_ft_meta.json").unlink()
    (moved / "xtts_ft_meta.json").write_text(json.dumps({**meta, "source_checkpoint": "/elsewhere/step_000002"}))
    rc, _, err = _cli("--model", str(moved), "--repo-id", REPO, "--dry-run", "--out", str(tmp_path / "out"))
    assert rc == 0, err
    card = (tmp_path / "out" / "README.md").read_text(encoding="utf-8")
    assert "a speech recogniser that the records found here do not name" in card  # not guessed
    assert "read from the checkpoint's meta.json" in card and "| CER, short texts (under 20 characters) | 2.5 |" in card
    assert "Not recorded here (the run's data/report.json was not found)" in card and "## Samples" not in card
    assert not (tmp_path / "out" / "samples").exists()


@pytest.mark.parametrize("token, code", [("hf_wrong", "401"), ("hf_read", "403")])
def test_a_refused_token_is_one_line_naming_the_login(export_only, tmp_path, monkeypatch, token, code):
    import huggingface_hub.constants

    with serve_hub({}, tokens={"hf_read": "read"}) as url:
        monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", url)
        monkeypatch.setenv("HF_TOKEN", token)
        rc, _, err = _cli("--model", str(export_only), "--repo-id", REPO, "--out", str(tmp_path / "up"))
    assert rc == 2 and len(_errors(err)) == 1
    assert code in err and "`hf auth login`" in err and "HF_TOKEN" in err
    assert REPO not in StandInHub.repos


def test_no_token_is_one_line_before_any_work(export_only, tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_TOKEN_PATH", str(tmp_path / "no_token"))
    rc, _, err = _cli("--model", str(export_only), "--repo-id", REPO, "--out", str(tmp_path / "up"))
    assert rc == 2 and len(_errors(err)) == 1 and "not logged in" in err and "`hf auth login`" in err
    assert not (tmp_path / "up").exists()


def test_offline_is_one_line_before_any_work(export_only, tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # what HF_HUB_OFFLINE=1 sets
    monkeypatch.setenv("HF_TOKEN", "hf_write")
    rc, _, err = _cli("--model", str(export_only), "--repo-id", REPO, "--out", str(tmp_path / "up"))
    assert rc == 2 and len(_errors(err)) == 1 and "HF_HUB_OFFLINE" in err and "--dry-run" in err
    assert not (tmp_path / "up").exists()


def test_no_network_is_one_line(export_only, tmp_path, monkeypatch, dead_endpoint):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", dead_endpoint)
    monkeypatch.setenv("HF_TOKEN", "hf_write")
    rc, _, err = _cli("--model", str(export_only), "--repo-id", REPO, "--out", str(tmp_path / "up"))
    assert rc == 2 and len(_errors(err)) == 1 and "no connection to the Hub" in err


def test_a_repo_id_without_owner_is_refused(export_only, tmp_path):
    rc, _, err = _cli("--model", str(export_only), "--repo-id", "xtts-amharic", "--dry-run", "--out", str(tmp_path / "x"))
    assert rc == 2 and "OWNER/NAME" in err and not (tmp_path / "x").exists()
