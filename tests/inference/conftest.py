"""The fixtures the generation tests share with the evaluation and serve tests: a vocab that knows [am], a briefly
trained model (tests/evaluate/conftest.py), and the tiny export with an engine on it (tests/serve/conftest.py; the
streaming vocoder is tested on the engine's model, whose HiFiGAN weight norm is folded as serving runs it)."""

from tests.evaluate.conftest import am_vocab, tokenizer, trained  # noqa: F401
from tests.serve.conftest import engine, tiny_export, voices_dir  # noqa: F401
