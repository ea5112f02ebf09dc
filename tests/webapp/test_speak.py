"""The Speak tab's length limit: one limit, the server's (serve.max_input_chars), refused in one line before
the model loads (issue 31, item 10)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xtts_ft.config import ServeConfig
from xtts_ft.errors import DataError
from xtts_ft.model_folder import EXPORT_META
from xtts_ft.text_settings import TextSettings
from xtts_ft.webapp.speak import EngineHolder, SpeakSettings, reading, speak, text_limit


class _NoModel(EngineHolder):
    def get(self, model, settings):
        raise AssertionError("the model was loaded for a text that is refused")


def test_the_limit_is_the_servers_from_the_runs_config(tmp_path: Path):
    run = tmp_path / "run"
    assert text_limit(run) == ServeConfig.max_input_chars  # no config yet: the schema's default (4096)
    run.mkdir()
    (run / "config.yaml").write_text("serve:\n  max_input_chars: 12\n", encoding="utf-8")
    assert text_limit(run) == 12
    (run / "config.yaml").write_text("serve:\n  max_input_chars: nonsense\n", encoding="utf-8")
    assert text_limit(run) == ServeConfig.max_input_chars


def test_a_text_over_the_limit_is_refused_in_one_line_before_the_model_loads(tmp_path: Path):
    settings = TextSettings(fold_homophones=True, char_limit=200)
    assert reading("ሰላም ለዓለም።", settings, 12) == "ሰላም ለአለም."  # 10 characters: within the limit
    text = "ሰላም ለዓለም። " * 3
    with pytest.raises(DataError) as err:
        reading(text, settings, 12)
    assert str(err.value) == (f"text: {len(text)} characters; at most 12 at a time (serve.max_input_chars, the "
                              f"server's limit too): speak it in several parts")
    model = tmp_path / "export"
    model.mkdir()
    (model / EXPORT_META).write_text(json.dumps({"text": settings.to_dict()}), encoding="utf-8")
    clip = tmp_path / "voice.wav"
    clip.write_bytes(b"RIFF")
    with pytest.raises(DataError, match="at most 12 at a time"):
        speak(_NoModel(), model, text, clip, tmp_path / "out.wav", SpeakSettings(0.7, None), max_chars=12)
    assert not (tmp_path / "out.wav").exists()


def test_the_holder_closes_the_old_engine_and_opens_a_small_one(monkeypatch, tmp_path: Path):
    """A new model or new settings: the old engine is closed first (its decode thread held the model), and the Speak
    tab's engine batches 2 rows, not the server's 16 (on a card, graphs lay its decode cache out for that many)."""
    from xtts_ft.webapp import speak as speak_module

    opened: list = []

    class _Engine:
        def __init__(self, settings):
            self.settings, self.closed = settings, False

        def close(self):
            self.closed = True

    def open_engine(source, device, *, temperature, max_codes, settings):
        opened.append(_Engine(settings))
        return opened[-1]

    monkeypatch.setattr(speak_module.SpeechEngine, "open", open_engine)
    monkeypatch.setattr(speak_module, "resolve_model", lambda model: model)
    holder = EngineHolder()
    first = holder.get(tmp_path / "a", SpeakSettings(0.7, None))
    assert holder.get(tmp_path / "a", SpeakSettings(0.7, None)) is first and not first.closed  # kept
    second = holder.get(tmp_path / "b", SpeakSettings(0.7, None))
    assert first.closed and not second.closed and len(opened) == 2
    assert second.settings.max_active_streams == 2 < ServeConfig.max_active_streams
