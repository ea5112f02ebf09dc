"""tokenizer_command: text files in, vocab.json + report.json out; every unreadable file is named."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from xtts_ft.errors import TokenizerError
from xtts_ft.tokenizer import read_text_lines, tokenizer_command
from xtts_ft.tokenizer.command import text_files_in

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "tokenizer_compression.py"


def test_builds_from_text_files(tiny_vocab, amharic_lines, tmp_path, nfc):
    a, b, held = tmp_path / "a.txt", tmp_path / "b.txt", tmp_path / "held.txt"
    a.write_text("\ufeff" + "\n".join(amharic_lines[:200]) + "\n\n   \n", encoding="utf-8")  # BOM, blank lines
    b.write_text("\r\n".join(amharic_lines[200:380]), encoding="utf-8")
    held.write_text("\n".join(amharic_lines[380:]), encoding="utf-8")
    report = tokenizer_command(tiny_vocab, [a, b], 800, tmp_path / "tok", nfc, min_frequency=2, eval_files=[held])
    assert report.train_texts == 380 and report.eval_texts == len(amharic_lines) - 380
    assert report.new_tokens_added == 800 and report.eval_unk_rate == 0.0
    saved = json.loads((tmp_path / "tok" / "report.json").read_text(encoding="utf-8"))
    assert saved["fingerprint"] == report.fingerprint and (tmp_path / "tok" / "vocab.json").is_file()


def test_read_text_lines_strips_and_skips_blanks(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("\ufeff ሰላም \n\n\tዓለም\r\n", encoding="utf-8")
    assert read_text_lines(path) == ["ሰላም", "ዓለም"]


def test_missing_folder_and_non_utf8_files_are_named(tiny_vocab, tmp_path, nfc):
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("ሰላም\n".encode() + "café\n".encode("latin-1"))
    empty = tmp_path / "empty_folder"
    empty.mkdir()
    cases = [
        (tmp_path / "missing.txt", "not found"),
        (empty, "folder holds no .txt file"),
        (bad, "not UTF-8 \\(bad byte 0xe9 on line 2\\)"),
    ]
    for path, expected in cases:
        with pytest.raises(TokenizerError, match=expected) as err:
            tokenizer_command(tiny_vocab, [path], 800, tmp_path / "out", nfc, min_frequency=2)
        assert str(path) in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(TokenizerError, match="no text files"):
        tokenizer_command(tiny_vocab, [], 800, tmp_path / "out", nfc, min_frequency=2)


def test_a_folder_stands_for_its_txt_files(tiny_vocab, train_lines, tmp_path, nfc):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    half = len(train_lines) // 2
    (corpus / "a.txt").write_text("\n".join(train_lines[:half]), encoding="utf-8")
    (corpus / "b.txt").write_text("\n".join(train_lines[half:]), encoding="utf-8")
    (corpus / "notes.md").write_text("not text for the tokenizer", encoding="utf-8")
    single = tmp_path / "all.txt"
    single.write_text("\n".join(train_lines), encoding="utf-8")
    assert text_files_in([corpus, single]) == [corpus / "a.txt", corpus / "b.txt", single]
    from_folder = tokenizer_command(tiny_vocab, [corpus], 800, tmp_path / "f", nfc, min_frequency=2)
    from_file = tokenizer_command(tiny_vocab, [single], 800, tmp_path / "s", nfc, min_frequency=2)
    assert from_folder.train_texts == from_file.train_texts == len(train_lines)
    assert from_folder.fingerprint == from_file.fingerprint


def test_benchmark_script_runs_and_prints_the_table(tiny_vocab, train_lines, eval_lines, tmp_path, capsys):
    train, held = tmp_path / "train.txt", tmp_path / "held.txt"
    train.write_text("\n".join(train_lines), encoding="utf-8")
    held.write_text("\n".join(eval_lines), encoding="utf-8")
    spec = importlib.util.spec_from_file_location("tokenizer_compression", BENCHMARK)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rc = bench.main(["--train-text", str(train), "--heldout", str(held), "--base-vocab", str(tiny_vocab),
                     "--sizes", "600", "800", "--fractions", "0.5", "1"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "chars only" in out and "N=600" in out and "N=800" in out and f"{len(train_lines)} lines" in out
    table = out.split("N=2000 ext tok/char")[1].splitlines()[1:]
    half, whole = (line.split() for line in table[:2])
    assert half[0] == "0.5" and whole[0] == "1" and 0 < int(half[1]) < int(whole[1]) == len(train_lines)
    assert bench.main(["--train-text", str(tmp_path / "nope.txt"), "--heldout", str(held),
                       "--base-vocab", str(tiny_vocab)]) == 2
