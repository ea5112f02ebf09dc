"""The model card states only what the records show: XTTS-v2 is named as the base (metadata and text) only when the
export's base model is XTTS-v2, speaker similarity from another base's encoder is marked meaningless, and the
"How to use" lines start a server that has a voice."""

from __future__ import annotations

import logging

import pytest
from huggingface_hub import metadata_load

from xtts_ft.publish.card import CardFacts, render_card

METRICS = {"sample_cer": 0.4, "sample_speaker_similarity": 0.977, "sample_stop_rate": 1.0, "sample_tail_rate": 0.25,
           "sample_quality_mos": 2.1, "reference_quality_mos": 2.9}


def _card(base_model: str, tmp_path) -> tuple[dict, str]:
    facts = CardFacts(repo_id="alice/amharic", language="am", step=500, metrics=dict(METRICS),
                      metrics_source="the run's samples/index.jsonl", recognizer="some/asr",
                      export_meta={"base_model": base_model, "language": "am", "text_tokens": 7000, "vocab_fingerprint": "abc",
                                   "text": {"char_limit": 200, "fold_homophones": True}})
    path = tmp_path / "README.md"
    path.write_text(str(render_card(facts, "https://huggingface.co")), encoding="utf-8")
    return metadata_load(path), path.read_text(encoding="utf-8")


def test_a_tiny_random_base_is_not_called_xtts_v2(tmp_path):
    meta, card = _card("/home/me/runs/demo/tiny_base", tmp_path)
    assert "base_model" not in meta and "xtts-v2" not in meta["tags"]
    assert "The base model `tiny_base` fine-tuned" in card and "**The base model is not coqui/XTTS-v2**" in card
    assert "are XTTS-v2's" not in card and "derive from XTTS-v2" not in card
    assert "| 0.977 (meaningless here, see below) |" in card
    assert "its encoder is not XTTS-v2's trained one" in card and "/home/me" not in card


@pytest.mark.parametrize("base", ["/root/.cache/huggingface/hub/models--coqui--XTTS-v2/snapshots/0123abcd",
                                  "/models/XTTS-v2"])
def test_an_xtts_v2_base_is_named_in_the_metadata_and_the_text(tmp_path, base):
    meta, card = _card(base, tmp_path)
    assert meta["base_model"] == "coqui/XTTS-v2" and "xtts-v2" in meta["tags"]
    assert "the speaker encoder and HiFi-GAN decoder are XTTS-v2's" in card
    assert "| 0.977 |" in card and "meaningless" not in card
    # the listening figures, each with what it cannot say
    assert "| tail rate (samples that kept talking after their text) | 0.25 |" in card
    assert "| predicted quality of the samples (DNSMOS, 1-5) | 2.1 |" in card and "| 2.9 |" in card
    assert "trained on English listeners' ratings" in card and "never alone" in card


def test_how_to_use_serves_with_a_voice_and_asks_for_it(tmp_path):
    _, card = _card("/models/XTTS-v2", tmp_path)
    usage = card[card.index("## How to use"):]
    assert "cp my_recording.wav voices/narrator.wav" in usage
    assert "python -m xtts_ft serve --model xtts_voice --voices voices" in usage
    assert '"voice": "narrator"' in usage and "--speaker-wav voices/narrator.wav" in usage


def test_the_publish_warning_matches_what_the_card_does(caplog):
    from types import SimpleNamespace

    from xtts_ft.publish.card import gather_facts

    resolved = SimpleNamespace(run_dir=None, loads_as="export", model_dir=None)
    with caplog.at_level(logging.WARNING, logger="xtts_ft.publish.card"):
        gather_facts(resolved, {"base_model": "/x/tiny_base", "step": 3}, "alice/amharic")
    (line,) = [r.getMessage() for r in caplog.records]
    assert "the base model was tiny_base, not coqui/XTTS-v2" in line and "names no base_model" in line
