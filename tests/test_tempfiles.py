"""Temporary names are per process, and clean-up never deletes a live writer's file."""

from __future__ import annotations

import subprocess
import sys

from xtts_ft.tempfiles import remove_stray_parts, temp_sibling


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
