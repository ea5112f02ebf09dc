"""The committed small recogniser, loaded once, and configs that name it."""

from __future__ import annotations

import pytest

from xtts_ft.asr import SMALL_MODEL_DIR
from xtts_ft.config import Config, with_changes


@pytest.fixture(scope="session")
def small_recognizer():
    from xtts_ft.asr.recognizer import Recognizer

    return Recognizer(SMALL_MODEL_DIR, device="cpu")


@pytest.fixture
def ingest_cfg() -> Config:
    return with_changes(Config(), asr={"model": str(SMALL_MODEL_DIR), "device": "cpu"})
