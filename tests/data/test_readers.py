"""Readers: LJSpeech, coqui CSV and folder layouts, detection, tolerance and path safety."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.data.datahelpers import write_audio
from xtts_ft.data.entries import resolve_inside
from xtts_ft.data.readers import detect_format, read_entries
from xtts_ft.errors import DataError


def _by_where(entries):
    return {e.where: e for e in entries}


def test_ljspeech_bom_crlf_header_extra_columns(tmp_path: Path):
    root = tmp_path.resolve()
    for i in range(3):
        write_audio(root / "wavs" / f"a{i}.wav", 0.3)
    write_audio(root / "wavs" / "b.flac", 0.3, format="FLAC")
    text = (
        "\ufeffid|text|normalized_text\r\n"
        "a0|raw zero|norm zero\r\n"
        "a1|raw one|\r\n"  # empty normalized column -> text column
        "a2|raw two|norm two|extra|columns\r\n"
        "\r\n"
        "b|flac one\r\n"  # found as wavs/b.flac
        "onlyone\r\n"
        "|no id\r\n"
        "gone|missing audio\r\n"
    )
    (root / "metadata.csv").write_bytes(text.encode("utf-8"))
    layout, entries = read_entries(root, "auto", "spk", [])
    assert layout == "ljspeech"
    got = _by_where(entries)
    assert "metadata.csv:1" not in got  # the header row is not a clip
    assert got["metadata.csv:2"].text == "norm zero" and got["metadata.csv:2"].clip_id == "wavs/a0.wav"
    assert got["metadata.csv:3"].text == "raw one"
    assert got["metadata.csv:4"].text == "norm two" and got["metadata.csv:4"].rejection is None
    assert got["metadata.csv:6"].audio == root / "wavs" / "b.flac"
    assert got["metadata.csv:7"].rejection[0] == "bad_row"
    assert got["metadata.csv:8"].rejection[0] == "bad_row"
    assert got["metadata.csv:9"].rejection == ("missing_file", "audio file 'wavs/gone.wav' not found")
    assert all(e.speaker == "spk" for e in entries)
    assert len(entries) == 7


def test_ljspeech_without_header(ljspeech: Path):
    layout, entries = read_entries(ljspeech.resolve(), "ljspeech", "spk", [])
    assert layout == "ljspeech" and len(entries) == 6
    assert all(e.rejection is None for e in entries)


def test_coqui_header_by_name_and_no_header(tmp_path: Path):
    root = tmp_path.resolve()
    write_audio(root / "clips" / "x.wav", 0.3)
    write_audio(root / "clips" / "y.ogg", 0.3, format="OGG", subtype="VORBIS")
    (root / "metadata_train.csv").write_text(
        "\ufeffspeaker_name|audio_file|emotion_name|text\r\nann|clips/x.wav|neutral|hello x\r\n|clips/y.ogg|sad|hello y\r\n",
        encoding="utf-8",
    )
    (root / "metadata_eval.csv").write_text("clips/x.wav|again x|bob\nclips/y.ogg|no speaker\nclips/y.ogg\n", encoding="utf-8")
    layout, entries = read_entries(root, "auto", "default", [])
    assert layout == "coqui"
    got = _by_where(entries)
    assert (got["metadata_train.csv:2"].speaker, got["metadata_train.csv:2"].text) == ("ann", "hello x")
    assert got["metadata_train.csv:3"].speaker == "default"  # empty speaker column
    # the same file named twice: the second entry is a duplicate, the first one counts
    assert got["metadata_eval.csv:1"].rejection[0] == "duplicate_audio"
    assert got["metadata_eval.csv:2"].rejection[0] == "duplicate_audio"
    assert got["metadata_eval.csv:3"].rejection[0] == "bad_row"


def test_coqui_header_without_text_column_is_a_data_error(tmp_path: Path):
    (tmp_path / "metadata.csv").write_text("audio_file|speaker_name\nx.wav|a\n", encoding="utf-8")
    with pytest.raises(DataError, match="lacks an audio_file or text column"):
        read_entries(tmp_path.resolve(), "coqui", "s", [])


def test_folder_layout_with_orphans_and_subfolders(tmp_path: Path):
    root = tmp_path.resolve()
    write_audio(root / "a.wav", 0.3)
    (root / "a.txt").write_text("\ufefftext of a\r\nsecond line\r\n", encoding="utf-8")
    write_audio(root / "sub" / "b.mp3.wav", 0.3)
    (root / "sub" / "b.mp3.txt").write_text("text of b", encoding="utf-8")
    write_audio(root / "no_transcript.wav", 0.3)
    (root / "no_audio.txt").write_text("lonely", encoding="utf-8")
    write_audio(root / "latin1.wav", 0.3)
    (root / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    write_audio(root / ".hidden" / "h.wav", 0.3)
    (root / ".hidden" / "h.txt").write_text("hidden", encoding="utf-8")
    assert detect_format(root, []) == "folder"
    _, entries = read_entries(root, "auto", "spk", [])
    got = {e.clip_id: e for e in entries}
    assert got["a.wav"].text == "text of a second line"
    assert got["sub/b.mp3.wav"].text == "text of b"
    assert got["no_transcript.wav"].rejection[0] == "missing_file"
    assert got["no_audio.txt"].rejection[0] == "missing_file"
    assert got["latin1.wav"].rejection[0] == "unreadable"
    assert not any(cid.startswith(".hidden") for cid in got)


def test_paths_outside_the_root_are_rejected(tmp_path: Path):
    root = (tmp_path / "ds").resolve()
    outside = write_audio(tmp_path / "outside.wav", 0.3).resolve()
    write_audio(root / "wavs" / "in.wav", 0.3)
    (root / "wavs" / "link_out.wav").symlink_to(outside)
    (root / "wavs" / "link_in.wav").symlink_to(root / "wavs" / "in.wav")
    assert resolve_inside(root, "../outside.wav")[2][0] == "outside_root"
    assert resolve_inside(root, str(outside))[2][0] == "outside_root"
    assert resolve_inside(root, "wavs/link_out.wav")[2][0] == "outside_root"
    assert resolve_inside(root, "wavs/../wavs/in.wav")[:2] == ("wavs/in.wav", root / "wavs" / "in.wav")
    assert resolve_inside(root, "wavs\\in.wav")[0] == "wavs/in.wav"  # Windows separators
    assert resolve_inside(root, str(root / "wavs" / "in.wav"))[2] is None  # absolute but inside
    assert resolve_inside(root, "wavs/link_in.wav")[2] is None


def test_detection_failure_names_what_was_looked_for(tmp_path: Path):
    (tmp_path / "notes.md").write_text("nothing here", encoding="utf-8")
    with pytest.raises(DataError) as err:
        read_entries(tmp_path.resolve(), "auto", "s", [])
    msg = str(err.value)
    assert "metadata.csv" in msg and "metadata_train.csv" in msg and ".txt" in msg and "\n" not in msg


def test_non_utf8_metadata_names_file_and_line(tmp_path: Path):
    (tmp_path / "metadata.csv").write_bytes(b"a|ok\nb|caf\xe9\n")
    with pytest.raises(DataError, match=r"metadata.csv: line 2 is not UTF-8"):
        read_entries(tmp_path.resolve(), "ljspeech", "s", [])


def test_named_format_without_its_file(tmp_path: Path):
    with pytest.raises(DataError, match="no metadata.csv found for the ljspeech layout"):
        read_entries(tmp_path.resolve(), "ljspeech", "s", [])


def test_folder_links_inside_are_followed_outside_counted(tmp_path: Path):
    root = (tmp_path / "ds").resolve()
    write_audio(root / "real" / "a.wav", 0.3)
    (root / "real" / "a.txt").write_text("a", encoding="utf-8")
    (root / "alias").symlink_to(root / "real")  # the same folder twice: read once
    (root / "real" / "loop").symlink_to(root)  # a loop: not followed
    write_audio(tmp_path / "elsewhere" / "b.wav", 0.3)
    (tmp_path / "elsewhere" / "b.txt").write_text("b", encoding="utf-8")
    (root / "ext").symlink_to(tmp_path / "elsewhere")
    _, entries = read_entries(root, "folder", "spk", [])
    got = {e.clip_id: e.rejection for e in entries}
    assert set(got) == {"real/a.wav", "ext/"} and got["real/a.wav"] is None
    assert got["ext/"][0] == "outside_root"
