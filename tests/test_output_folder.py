"""xtts_ft.output_folder: who owns a command's --out folder, and the stage-then-swap every such command uses."""

from __future__ import annotations

import json

import pytest

from xtts_ft.layout import OUTPUT_MARKER
from xtts_ft.output_folder import (
    ADD,
    MOVE_ASIDE,
    OutputFolderError,
    claim_in_place,
    inspect_folder,
    staged_output,
)


def _write(stage, **files):
    for name, text in files.items():
        (stage / name).write_text(text, encoding="utf-8")


def test_a_new_folder_is_written_whole_with_a_marker_naming_the_command_and_its_files(tmp_path):
    with staged_output(tmp_path / "out", "make-random-model") as staged:
        assert staged.path != tmp_path / "out" and not (tmp_path / "out").exists()  # nothing visible until the swap
        _write(staged.path, **{"model.pth": "w1", "config.json": "{}"})
    marker = json.loads((tmp_path / "out" / OUTPUT_MARKER).read_text(encoding="utf-8"))
    assert marker["command"] == "make-random-model" and marker["files"] == ["config.json", "model.pth"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no staging folder left behind


def test_its_own_earlier_output_is_rewritten_but_a_folder_it_did_not_write_is_refused(tmp_path):
    with staged_output(tmp_path / "out", "make-random-model") as staged:
        _write(staged.path, **{"model.pth": "old"})
    with staged_output(tmp_path / "out", "make-random-model") as staged:
        _write(staged.path, **{"model.pth": "new"})
    assert (tmp_path / "out" / "model.pth").read_text() == "new"
    assert inspect_folder(tmp_path / "out", "export").kind == "foreign"  # another command's output is not export's

    (tmp_path / "base").mkdir()
    _write(tmp_path / "base", **{"model.pth": "the user's real weights", "vocab.json": "{}"})
    with pytest.raises(OutputFolderError) as refused:
        with staged_output(tmp_path / "base", "make-random-model"):
            raise AssertionError("the body must not run for a refused folder")
    message = str(refused.value)
    assert "\n" not in message and f"--out {tmp_path / 'base'}" in message
    assert "2 file(s) not written by this tool: model.pth, vocab.json" in message and "--move-old-aside" in message
    assert (tmp_path / "base" / "model.pth").read_text() == "the user's real weights"


def test_a_user_file_added_to_its_output_makes_the_folder_no_longer_its_own(tmp_path):
    with staged_output(tmp_path / "out", "export") as staged:
        _write(staged.path, **{"model.pth": "x"})
    _write(tmp_path / "out", **{"notes.txt": "mine"})
    with pytest.raises(OutputFolderError, match="earlier export plus 1 file"):
        with staged_output(tmp_path / "out", "export"):
            pass


def test_move_old_aside_keeps_every_old_file_beside_the_new_folder(tmp_path):
    (tmp_path / "out").mkdir()
    _write(tmp_path / "out", **{"model.pth": "theirs"})
    with staged_output(tmp_path / "out", "make-random-model", MOVE_ASIDE) as staged:
        _write(staged.path, **{"model.pth": "ours"})
    aside = staged.moved_to
    assert aside.parent == tmp_path and aside.name.startswith("out.old-")
    assert (aside / "model.pth").read_text() == "theirs" and (tmp_path / "out" / "model.pth").read_text() == "ours"


def test_a_failure_inside_leaves_the_old_folder_exactly_as_it_was(tmp_path):
    (tmp_path / "out").mkdir()
    _write(tmp_path / "out", **{"metadata.csv": "old rows"})
    with pytest.raises(KeyboardInterrupt):
        with staged_output(tmp_path / "out", "ingest", MOVE_ASIDE, replace_own=False) as staged:
            _write(staged.path, **{"metadata.csv": "half"})
            raise KeyboardInterrupt
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert (tmp_path / "out" / "metadata.csv").read_text() == "old rows"


def test_adding_starts_from_every_old_file_and_keeps_them(tmp_path):
    (tmp_path / "out" / "wavs").mkdir(parents=True)
    _write(tmp_path / "out", **{"metadata.csv": "a|b|c\n"})
    (tmp_path / "out" / "wavs" / "x.wav").write_bytes(b"RIFF")
    with staged_output(tmp_path / "out", "ingest", ADD, replace_own=False) as staged:
        assert (staged.path / "wavs" / "x.wav").read_bytes() == b"RIFF"
        _write(staged.path, **{"metadata.csv": "a|b|c\nnew\n"})
    assert staged.moved_to is None and (tmp_path / "out" / "wavs" / "x.wav").read_bytes() == b"RIFF"


def test_ingest_never_rewrites_its_own_dataset_unasked(tmp_path):
    with staged_output(tmp_path / "ds", "ingest", replace_own=False) as staged:
        _write(staged.path, **{"metadata.csv": "first session"})
    with pytest.raises(OutputFolderError, match="--add-to-existing"):
        with staged_output(tmp_path / "ds", "ingest", replace_own=False):
            pass


def test_an_in_place_command_claims_the_folder_once_and_moves_a_foreign_one_aside(tmp_path):
    assert claim_in_place(tmp_path / "p", "prepare") is None
    _write(tmp_path / "p", **{"metadata_train.csv": "rows"})  # written by prepare after the claim
    assert claim_in_place(tmp_path / "p", "prepare") is None  # its own, partial or not
    (tmp_path / "q").mkdir()
    _write(tmp_path / "q", **{"thesis.pdf": "x"})
    with pytest.raises(OutputFolderError, match="thesis.pdf"):
        claim_in_place(tmp_path / "q", "prepare")
    moved = claim_in_place(tmp_path / "q", "prepare", MOVE_ASIDE)
    assert (moved / "thesis.pdf").is_file() and (tmp_path / "q" / OUTPUT_MARKER).is_file()
