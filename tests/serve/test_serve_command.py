"""``python -m xtts_ft serve``: options that cannot work are one ``error:`` line before any model is loaded."""

from __future__ import annotations

import pytest

from xtts_ft.cli import main


@pytest.mark.parametrize("extra, words", [
    (["--wyoming", "udp://0.0.0.0:10200"], "--wyoming udp://0.0.0.0:10200: give tcp://HOST:PORT"),
    (["--port", "70000"], "--port 70000: must be 1-65535"),
    (["--max-codes", "0"], "--max-codes 0: must be 1 or more"),
])
def test_bad_options_are_one_line(tiny_export, capsys, extra, words):
    assert main(["serve", "--model", str(tiny_export), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {err[0][7:]}"] and words in err[0]


def test_a_folder_that_is_no_model_is_named(tmp_path, capsys):
    assert main(["serve", "--model", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"--model {tmp_path}: expected an export folder" in err and "Traceback" not in err
