"""Encoding with the extended vocabulary: base languages unchanged, Amharic round-trips, 'amh' == 'am'."""

from __future__ import annotations

import random

import pytest
from tokenizers import Tokenizer
from TTS.tts.layers.xtts.tokenizer import VoiceBpeTokenizer

from xtts_ft.errors import TokenizerError
from xtts_ft.tokenizer import AmharicTokenizer, canonical_language
from xtts_ft.tokenizer.ethiopic import ethiopic_characters
from xtts_ft.tokenizer.vocab_file import encode_many, read_vocab, xtts_text

SENTENCES = {
    "en": [
        "The quick brown fox jumps over the lazy dog.",
        "Is this the real life? Is this just fantasy!",
        "She sells sea shells by the sea shore; Peter Piper picked a peck.",
        "In 12.5 seconds, that will be $20, sir.",
        "hello   world - again, and again...",
    ],
    "de": ["Es gab fünfzig Soldaten, größer als üblich.", "Über den Wolken muss die Freiheit wohl grenzenlos sein."],
    "fr": ["Ceci est un test, n'est-ce pas? L'été à Paris.", "Où est la bibliothèque?"],
    "es": ["El niño comió una manzana en la mañana.", "¿Dónde está la estación?"],
    "it": ["Buongiorno, come stai oggi?"],
    "pt": ["Olá, tudo bem com você?"],
    "pl": ["Dzień dobry, jak się masz?"],
    "tr": ["Günaydın, nasılsınız?"],
    "ru": ["Привет, как дела у тебя сегодня?"],
    "cs": ["Dobrý den, jak se máte?"],
    "nl": ["Goedemorgen, hoe gaat het met je?"],
    "ar": ["مرحبا بكم في المدينة"],
}


def _languages(vocab_path) -> list[str]:
    ids = read_vocab(vocab_path).all_ids()
    return [lang for lang in SENTENCES if f"[{lang}]" in ids]


def test_base_language_sentences_encode_to_identical_ids(extended, nfc):
    base_path, out, _ = extended
    before = VoiceBpeTokenizer(str(base_path))
    after = AmharicTokenizer(out / "vocab.json", normalizer=nfc, char_limit=200, fold_homophones=False)
    langs = _languages(base_path)
    assert "en" in langs
    for lang in langs:
        for sentence in SENTENCES[lang]:
            assert after.encode(sentence, lang) == before.encode(sentence, lang), (lang, sentence)


def test_any_string_of_base_characters_encodes_identically(extended):
    """Fuzz: 3000 random strings over every character the base vocabulary knows."""
    base_path, out, _ = extended
    before, after = Tokenizer.from_file(str(base_path)), Tokenizer.from_file(str(out / "vocab.json"))
    alphabet = sorted(read_vocab(base_path).single_characters()) + [" "] * 10
    rng = random.Random(7)
    texts = ["".join(rng.choices(alphabet, k=rng.randint(1, 60))) for _ in range(3000)]
    real = [s for group in SENTENCES.values() for s in group]
    for text in texts + real:
        assert after.encode(xtts_text(text, "en")).ids == before.encode(xtts_text(text, "en")).ids, text


def test_amharic_round_trips_through_encode_and_decode(extended, amharic_lines, nfc):
    _, out, _ = extended
    tok = AmharicTokenizer(out / "vocab.json", normalizer=nfc, char_limit=200, fold_homophones=False)
    rng = random.Random(3)
    chars = ethiopic_characters()
    noise = [" ".join("".join(rng.choices(chars, k=rng.randint(1, 8))) for _ in range(6)) for _ in range(200)]
    for text in amharic_lines + noise + [" ሰላም  ዓለም ", "የbbc ዘጋቢ ሰላም!"]:
        ids = tok.encode(text, "am")
        assert tok.tokenizer.token_to_id("[UNK]") not in ids
        assert tok.decode(ids) == nfc(text)


def test_amharic_is_normalised_before_encoding(extended, nfc):
    _, out, _ = extended
    fold = AmharicTokenizer(out / "vocab.json", normalizer=lambda s: nfc(s).replace("ሐ", "ሀ"), char_limit=200,
                            fold_homophones=False)
    assert fold.encode("ሐገር", "am") == fold.encode("ሀገር", "am")
    decomposed = "ሰላም"  # Ethiopic has no decompositions, but the normaliser still runs
    plain = AmharicTokenizer(out / "vocab.json", normalizer=nfc, char_limit=200, fold_homophones=False)
    assert plain.encode(decomposed, "am") == plain.encode(nfc(decomposed), "am")


def test_amh_is_an_alias_of_am(extended, nfc):
    _, out, _ = extended
    tok = AmharicTokenizer(out / "vocab.json", normalizer=nfc, char_limit=150, fold_homophones=False)
    assert tok.encode("ሰላም ለዓለም።", "amh") == tok.encode("ሰላም ለዓለም።", "am")
    assert tok.char_limits["am"] == tok.char_limits["amh"] == 150
    assert canonical_language("amh") == "am" and canonical_language("en") == "en"


def test_batch_measuring_encodes_like_the_tokenizer(extended, amharic_lines, nfc):
    _, out, _ = extended
    tok = AmharicTokenizer(out / "vocab.json", normalizer=nfc, char_limit=200, fold_homophones=False)
    lines = [nfc(line) for line in amharic_lines[:40]]
    assert encode_many(tok.tokenizer, lines) == [tok.encode(line, "am") for line in lines]


def test_english_decode_drops_only_tags(extended, nfc):
    base_path, out, _ = extended
    tok = AmharicTokenizer(out / "vocab.json", normalizer=nfc, char_limit=200, fold_homophones=False)
    ids = tok.encode("the lazy dog", "en")
    assert tok.decode(ids) == "the lazy dog"
    assert VoiceBpeTokenizer(str(base_path)).decode(ids) == "[en]the lazy dog"  # coqui keeps the tag


def test_base_vocab_without_am_refuses_amharic(tiny_vocab, nfc):
    tok = AmharicTokenizer(tiny_vocab, normalizer=nfc, char_limit=200, fold_homophones=False)
    assert tok.encode("the dog", "en") == VoiceBpeTokenizer(str(tiny_vocab)).encode("the dog", "en")
    with pytest.raises(TokenizerError, match=r"no \[am\] token") as err:
        tok.encode("ሰላም", "amh")
    assert str(tiny_vocab) in str(err.value)


def test_missing_vocab_file_is_a_tokenizer_error(tmp_path):
    with pytest.raises(TokenizerError, match="not found"):
        AmharicTokenizer(tmp_path / "nope.json", char_limit=200, fold_homophones=False)


@pytest.mark.parametrize("fold", [False, True])
def test_the_factory_trains_and_encodes_with_the_same_front_end(tiny_vocab, train_lines, tmp_path, fold):
    """make_normalizer (tokenizer stage) and make_tokenizer (training, inference) read text alike."""
    from xtts_ft.text import normalize_text
    from xtts_ft.text_settings import TextSettings, make_normalizer
    from xtts_ft.tokenizer import build_extended_vocab
    from xtts_ft.tokenizer.voice_tokenizer import make_tokenizer

    settings = TextSettings(fold_homophones=fold, char_limit=200)
    report = build_extended_vocab(tiny_vocab, train_lines, 800, tmp_path, min_frequency=2,
                                  normalizer=make_normalizer(settings.fold_homophones))
    tok = make_tokenizer(tmp_path / "vocab.json", settings)
    sentence = "በ2014 ዓ.ም. ዶ/ር አበበ  ሰላም ሐሙስ አለ።"
    expected = normalize_text(sentence, fold_homophones=fold).text
    assert ("ሐ" in expected) is not fold
    assert tok.decode(tok.encode(sentence, "am")) == expected
    assert report.train_unk_rate == 0.0
