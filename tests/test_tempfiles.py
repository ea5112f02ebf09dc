"""Temporary names are per process, and clean-up never deletes a live writer's file."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from xtts_ft import tempfiles
from xtts_ft.tempfiles import atomic_write, remove_stray_parts, temp_sibling


def test_two_processes_get_different_temporary_names(tmp_path):
    target = tmp_path / "report.png"
    other = subprocess.run([sys.executable, "-c", f"from xtts_ft.tempfiles import temp_sibling; "
                            f"print(temp_sibling(__import__('pathlib').Path({str(target)!r})))"],
                           capture_output=True, text=True, check=True).stdout.strip()
    mine = temp_sibling(target)
    assert mine != other and mine.parent == target.parent and mine.name.startswith("report.png.")


def test_clean_up_removes_dead_writers_files_only(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        mine = temp_sibling(tmp_path / "a.wav")
        host = mine.name.split(".")[-2].rsplit("-", 1)[0]
        files = {
            "mine": mine,
            "live": tmp_path / f"b.wav.{host}-{live.pid}.part",
            "dead": tmp_path / f"c.wav.{host}-{dead.pid}.part",
            "other_host": tmp_path / f"d.wav.elsewhere-{dead.pid}.part",
            "old_style": tmp_path / "e.wav.part",
        }
        for f in files.values():
            f.write_bytes(b"x")
        assert remove_stray_parts(tmp_path) == 2
        assert {k for k, f in files.items() if f.exists()} == {"mine", "live", "other_host"}
    finally:
        live.kill()
        live.wait()


@pytest.mark.parametrize("durable", [False, True])
def test_atomic_write_takes_bytes_text_or_a_writer(tmp_path, monkeypatch, durable):
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(tempfiles.os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    atomic_write(tmp_path / "a.bin", b"\x00\x01", durable=durable)
    atomic_write(tmp_path / "b.txt", "ሰላም\n", durable=durable)
    atomic_write(tmp_path / "c.bin", lambda f: f.write(b"written"), durable=durable)
    assert (tmp_path / "a.bin").read_bytes() == b"\x00\x01"
    assert (tmp_path / "b.txt").read_text(encoding="utf-8") == "ሰላም\n"
    assert (tmp_path / "c.bin").read_bytes() == b"written"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin", "b.txt", "c.bin"]
    assert len(synced) == (6 if durable else 0)  # the file and its folder, per write


def test_a_failed_atomic_write_keeps_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "state.json"
    target.write_text("old", encoding="utf-8")

    def half_then_fail(f):
        f.write(b"half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        atomic_write(target, half_then_fail, durable=True)
    assert target.read_text(encoding="utf-8") == "old" and [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_replace_dir_swaps_a_finished_folder_in(tmp_path):
    from xtts_ft.tempfiles import replace_dir

    final, staged = tmp_path / "export", tmp_path / ".export.partial"
    staged.mkdir()
    (staged / "model.pth").write_bytes(b"new")
    replace_dir(staged, final)
    assert (final / "model.pth").read_bytes() == b"new" and not staged.exists()
    staged.mkdir()
    (staged / "model.pth").write_bytes(b"newer")
    replace_dir(staged, final, durable=True)
    assert [p.name for p in tmp_path.iterdir()] == ["export"] and (final / "model.pth").read_bytes() == b"newer"
