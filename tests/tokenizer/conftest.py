"""Shared fixtures: base vocabularies (tiny, and the project's full-size one in the real XTTS format), Amharic text,
extended vocabularies built once per session (the tiny model, ``tiny_model_dir``, is in tests/fixtures)."""

from __future__ import annotations

import unicodedata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SAMPLE_TEXT = REPO / "datasets" / "amharic_text" / "written_sample.txt"
# The full-size (6681 ids) base vocabulary in the real XTTS-v2 format that the project builds from its own
# text: written by utils/make_test_vocab.py (tests/test_random_model.py checks it is up to date).
FULL_VOCAB = REPO / "tests" / "assets" / "xtts_format_vocab.json"


def _nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


@pytest.fixture(scope="session")
def nfc():
    """NFC only: the tokenizer invariants are tested apart from the normaliser."""
    return _nfc


@pytest.fixture(scope="session")
def amharic_lines() -> list[str]:
    return [line for line in SAMPLE_TEXT.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="session")
def train_lines(amharic_lines) -> list[str]:
    return [line for i, line in enumerate(amharic_lines) if i % 5]


@pytest.fixture(scope="session")
def eval_lines(amharic_lines) -> list[str]:
    """Every fifth line, never trained on: unseen text for the compression tests."""
    return [line for i, line in enumerate(amharic_lines) if i % 5 == 0]


@pytest.fixture(scope="session")
def tiny_vocab(tmp_path_factory) -> Path:
    from xtts_ft.random_model import write_tiny_vocab

    path = tmp_path_factory.mktemp("tiny_vocab") / "vocab.json"
    write_tiny_vocab(path)
    return path


BASES = ["tiny", "full"]


@pytest.fixture(scope="session", params=BASES)
def base_vocab(request, tiny_vocab) -> Path:
    """Each base vocabulary in turn: the tiny one, then the full-size real-format one."""
    return tiny_vocab if request.param == "tiny" else FULL_VOCAB


NEW_TOKENS = 1000  # tests read it through the fixture below (test modules do not import conftest)


@pytest.fixture(scope="session")
def new_tokens() -> int:
    return NEW_TOKENS


@pytest.fixture(scope="session")
def extended(base_vocab, train_lines, eval_lines, nfc, tmp_path_factory):
    """(base vocab, out dir, report) of a 1000-token extension of ``base_vocab`` on the training lines."""
    from xtts_ft.tokenizer import build_extended_vocab

    out = tmp_path_factory.mktemp("extended")
    report = build_extended_vocab(base_vocab, train_lines, NEW_TOKENS, out, normalizer=nfc, eval_texts=eval_lines,
                                  min_frequency=2)
    return base_vocab, out, report
