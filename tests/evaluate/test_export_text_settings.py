"""A run with non-default text settings, exported: inference feeds the model the ids training did.

The run (the session's demo run, tests/fixtures/demo_run.py: headless_train.py on the demo data and the
tiny model) keeps homophone letters apart (``text.fold_homophones=false``; the schema's default folds
them) and splits sentences at 150 characters. Its export is then synthesised from, and every id the export's tokenizer hands the
model is compared with what the training tokenizer (built from the run's config.yaml, as the
recipe builds it) gives for the same text.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf

from tests.fixtures.demo_run import DEMO_CHAR_LIMIT
from xtts_ft.base_model import BaseModelFiles
from xtts_ft.config import TextConfig, TokenizerConfig, load_config
from xtts_ft.evaluate.export import EXPORT_META, export_from_checkpoint
from xtts_ft.evaluate.infer import synthesize_command
from xtts_ft.text_settings import TextSettings
from xtts_ft.tokenizer.voice_tokenizer import AmharicTokenizer, make_tokenizer

pytestmark = pytest.mark.slow  # reads the demo run (a full pipeline, once per session)

SENTENCE = "ሐሙስ ፀሐይ ወጣች፡ ሠራተኞቹ ዐረፉ።"  # homophone letters: folding would change its ids
CHAR_LIMIT = DEMO_CHAR_LIMIT


def test_export_of_a_non_default_run_synthesises_with_the_training_ids(tmp_path, demo_run, tiny_base_dir, monkeypatch):
    assert TextConfig.fold_homophones is True and TokenizerConfig.char_limit != CHAR_LIMIT  # really non-default
    run_dir = demo_run.run_dir

    cfg = load_config(run_dir / "config.yaml")
    training = make_tokenizer(run_dir / "tokenizer" / "vocab.json", TextSettings.from_config(cfg))
    folded = make_tokenizer(run_dir / "tokenizer" / "vocab.json", TextSettings(True, CHAR_LIMIT))
    expected = training.encode(SENTENCE, "am")
    assert expected != folded.encode(SENTENCE, "am")  # the settings matter for this sentence

    export = export_from_checkpoint(demo_run.last_checkpoint, tmp_path / "export",
                                    BaseModelFiles.from_dir(tiny_base_dir))
    meta = json.loads((export / EXPORT_META).read_text(encoding="utf-8"))
    assert meta["text"] == {"fold_homophones": False, "char_limit": CHAR_LIMIT}

    seen: list[tuple[list[int], int]] = []
    original = AmharicTokenizer.encode

    def spy(self, txt, lang):
        ids = original(self, txt, lang)
        seen.append((ids, self.char_limits["am"]))
        return ids

    monkeypatch.setattr(AmharicTokenizer, "encode", spy)
    voice = tmp_path / "voice.wav"
    sf.write(voice, 0.1 * np.sin(np.linspace(0, 2000, 3 * 22050)).astype("float32"), 22050)
    synthesize_command(export, SENTENCE, voice, tmp_path / "out.wav", max_new_tokens=5, device="cpu", temperature=0.7)
    assert (tmp_path / "out.wav").is_file()
    assert seen and all(ids == expected and limit == CHAR_LIMIT for ids, limit in seen)
