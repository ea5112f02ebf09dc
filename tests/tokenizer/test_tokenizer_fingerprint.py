"""vocab_fingerprint identifies a token table; check_vocab_matches refuses a different one in one line."""

from __future__ import annotations

import json

import pytest
from tokenizers import Tokenizer

from xtts_ft.errors import TokenizerError
from xtts_ft.tokenizer import check_vocab_matches, vocab_fingerprint


def test_fingerprint_ignores_formatting_and_merge_format(base_vocab, tmp_path):
    data = json.loads(base_vocab.read_text(encoding="utf-8"))
    compact = tmp_path / "compact.json"
    compact.write_text(json.dumps(data, separators=(",", ":"), sort_keys=True), encoding="utf-8")
    resaved = tmp_path / "resaved.json"  # tokenizers >= 0.20 rewrites "a b" merges as ["a", "b"]
    Tokenizer.from_file(str(base_vocab)).save(str(resaved))
    fp = vocab_fingerprint(base_vocab)
    assert len(fp) == 16 and int(fp, 16) >= 0
    assert vocab_fingerprint(compact) == fp == vocab_fingerprint(resaved)


def test_fingerprint_changes_with_any_token_or_merge(tiny_vocab, tmp_path):
    data = json.loads(tiny_vocab.read_text(encoding="utf-8"))
    fp = vocab_fingerprint(tiny_vocab)
    swapped = json.loads(json.dumps(data))
    swapped["model"]["merges"][:2] = swapped["model"]["merges"][1::-1]
    renamed = json.loads(json.dumps(data))
    renamed["added_tokens"][-1]["content"] = "[xx]"
    for i, variant in enumerate((swapped, renamed)):
        path = tmp_path / f"v{i}.json"
        path.write_text(json.dumps(variant), encoding="utf-8")
        assert vocab_fingerprint(path) != fp


def test_extension_has_its_own_fingerprint(extended):
    base_path, out, report = extended
    assert report.fingerprint == vocab_fingerprint(out / "vocab.json") != vocab_fingerprint(base_path)
    assert report.base_fingerprint == vocab_fingerprint(base_path)  # which base it extends, for the model stage


def test_matching_vocab_passes(extended):
    _, out, report = extended
    check_vocab_matches(report.fingerprint, out / "vocab.json", "runs/am/checkpoints/step_000500")


def test_other_vocab_is_refused_with_one_clear_line(extended):
    base_path, out, report = extended
    with pytest.raises(TokenizerError) as err:
        check_vocab_matches(report.fingerprint, base_path, "runs/am/checkpoints/step_000500")
    msg = str(err.value)
    assert msg == (
        f"checkpoint runs/am/checkpoints/step_000500 was trained with vocabulary {report.fingerprint} but "
        f"{base_path} is {vocab_fingerprint(base_path)}; use the vocab.json saved in the checkpoint folder, "
        f"or start a new run (resume: never)"
    )
    assert "\n" not in msg and "size mismatch" not in msg


def test_missing_or_broken_vocab_is_a_tokenizer_error(tmp_path):
    with pytest.raises(TokenizerError, match="not found"):
        check_vocab_matches("0" * 16, tmp_path / "vocab.json", "step_1")
    broken = tmp_path / "broken.json"
    broken.write_bytes(b"\xff\xfe not json")
    with pytest.raises(TokenizerError, match=str(broken)):
        vocab_fingerprint(broken)
