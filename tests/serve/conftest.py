"""One tiny export, one engine and one in-process server (uvicorn on a loopback port) shared by the serve tests.

The export is what ``python -m xtts_ft export`` writes for the demo's tiny random model: the tiny base
with an ``[am]`` token added (the smallest extended vocabulary), exported by the project's export code.
A random GPT never says stop, so the engine caps generation at ``MAX_CODES`` audio codes (~0.9 s) per
piece: every request here costs about a second of CPU per piece. The export is written once per test run (under
pytest-xdist by one worker, tests/fixtures/parallel.py ``built_once``); each worker opens its own engine.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.fixtures.parallel import built_once
from tests.serve.servehelpers import API_KEY, MAX_CODES, VOICE_CLIP, ServerThread


@pytest.fixture(scope="session")
def tiny_export(tiny_base_dir, tmp_path_factory) -> Path:
    from tokenizers import Tokenizer

    from xtts_ft.base_model import BaseModelFiles
    from xtts_ft.evaluate.export import export_model
    from xtts_ft.model import build_xtts
    from xtts_ft.text_settings import TextSettings
    from xtts_ft.tokenizer.voice_tokenizer import make_tokenizer

    def build(root: Path) -> None:
        base = BaseModelFiles.from_dir(tiny_base_dir)
        vocab = root / "vocab.json"
        tok = Tokenizer.from_file(str(base.vocab_json))
        tok.add_special_tokens(["[am]"])
        tok.save(str(vocab))
        settings = TextSettings(fold_homophones=False, char_limit=200)
        xtts = build_xtts(base, vocab, make_tokenizer(vocab, settings))
        export_model(base=base, vocab_path=vocab, gpt_state_dict=xtts.gpt.state_dict(), out_dir=root / "export",
                     text=settings, language="am")

    return built_once(tmp_path_factory, "serve_model", build) / "export"


@pytest.fixture(scope="session")
def voices_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("voices")
    shutil.copyfile(VOICE_CLIP, folder / "spk1.flac")
    return folder


@pytest.fixture(scope="session")
def engine(tiny_export, voices_dir):
    from xtts_ft.config import ServeConfig
    from xtts_ft.serve.engine import SpeechEngine
    from xtts_ft.serve.model_source import resolve_model

    # No retries of short pieces here: a random GPT never stops, so each would triple the cost of a request
    # (test_serve_engine.py measures the retry on its own engine).
    return SpeechEngine.open(resolve_model(tiny_export), "cpu", voices_dir=voices_dir, max_codes=MAX_CODES,
                             settings=ServeConfig(short_text_retries=0))


@pytest.fixture(scope="session")
def server(engine):
    from xtts_ft.serve.http_app import create_app

    with ServerThread(create_app(engine, api_key=API_KEY)) as running:
        yield running
