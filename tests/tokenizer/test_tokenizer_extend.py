"""build_extended_vocab: base ids untouched, [am] and Ethiopic characters added, merges consistent."""

from __future__ import annotations

import json
import random

import pytest
from tokenizers import Tokenizer

from xtts_ft.errors import TokenizerError
from xtts_ft.tokenizer import build_extended_vocab, vocab_fingerprint
from xtts_ft.tokenizer.ethiopic import ethiopic_characters, is_ethiopic
from xtts_ft.tokenizer.vocab_file import read_vocab, xtts_text, xtts_words


def test_base_tokens_merges_and_added_tokens_are_kept_as_is(extended):
    base_path, out, report = extended
    base, ext = read_vocab(base_path), read_vocab(out / "vocab.json")
    for token, token_id in base.vocab.items():
        assert ext.vocab[token] == token_id
    assert ext.merges[: len(base.merges)] == base.merges
    assert ext.added_tokens[: len(base.added_tokens)] == base.added_tokens
    assert ext.merges_as_strings == base.merges_as_strings  # the file keeps its own merge format
    assert report.base_vocab_size == base.num_rows


def test_base_ids_are_the_same_once_loaded_by_tokenizers(extended):
    """tokenizers ignores the JSON id of an added token missing from the model vocab: ids must not move."""
    base_path, out, _ = extended
    before = Tokenizer.from_file(str(base_path)).get_vocab(with_added_tokens=True)
    after = Tokenizer.from_file(str(out / "vocab.json")).get_vocab(with_added_tokens=True)
    assert {t: after.get(t) for t in before} == before
    assert after == read_vocab(out / "vocab.json").all_ids()


def test_a_base_vocab_whose_ids_do_not_load_as_written_is_refused(tiny_vocab, tmp_path, nfc):
    data = json.loads(tiny_vocab.read_text(encoding="utf-8"))
    for token in data["added_tokens"]:
        if token["content"] == "[START]":
            token["id"] = 300  # tokenizers would load it as 140
    bad = tmp_path / "vocab.json"
    bad.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(TokenizerError, match=r"inconsistent.*\[START\] \(300 -> 140\)|\[START\] \(300 -> 140\).*inconsistent"):
        build_extended_vocab(bad, ["ሰላም"], 600, tmp_path / "out", normalizer=nfc, min_frequency=2)


def test_new_ids_are_appended_contiguously_after_the_highest_base_id(extended, new_tokens):
    base_path, out, report = extended
    base, ext = read_vocab(base_path), read_vocab(out / "vocab.json")
    new_ids = sorted(i for t, i in ext.all_ids().items() if t not in base.all_ids())
    assert new_ids == list(range(base.num_rows, ext.num_rows))
    assert ext.all_ids()["[am]"] == base.num_rows
    assert report.vocab_size == ext.num_rows == report.base_vocab_size + report.new_tokens_added
    assert report.new_tokens_added == new_tokens  # the sample text supports more than 1000


def test_am_is_a_special_added_token_and_one_id(extended):
    _, out, _ = extended
    ext = read_vocab(out / "vocab.json")
    (entry,) = [t for t in ext.added_tokens if t["content"] == "[am]"]
    assert entry["special"] and not entry["normalized"]
    tok = Tokenizer.from_file(str(out / "vocab.json"))
    ids = tok.encode(xtts_text("ሰላም ነው", "am")).ids
    assert ids[0] == entry["id"] and tok.id_to_token(ids[1]) != "["


def test_every_merge_is_consistent_and_new_merges_touch_only_amharic(extended):
    base_path, out, _ = extended
    base, ext = read_vocab(base_path), read_vocab(out / "vocab.json")
    for left, right in ext.merges:
        assert left in ext.vocab and right in ext.vocab and left + right in ext.vocab
    base_chars = base.single_characters()
    new = ext.merges[len(base.merges) :]
    assert len(new) > 300
    for left, right in new:
        token = left + right
        assert len(token) > 1
        assert any(is_ethiopic(c) or c not in base_chars for c in token), token
    assert len(set(new)) == len(new) and not set(new) & set(base.merges)


def test_every_ethiopic_character_has_its_own_token(extended):
    _, out, _ = extended
    tok = Tokenizer.from_file(str(out / "vocab.json"))
    assert len(ethiopic_characters()) == 495
    for char in ethiopic_characters():
        assert tok.token_to_id(char) is not None, hex(ord(char))


def test_amharic_never_encodes_to_unk(extended, amharic_lines, nfc):
    _, out, _ = extended
    tok = Tokenizer.from_file(str(out / "vocab.json"))
    unk = tok.token_to_id("[UNK]")
    rng = random.Random(1)
    chars = ethiopic_characters()
    noise = [" ".join("".join(rng.choices(chars, k=rng.randint(1, 9))) for _ in range(8)) for _ in range(300)]
    for text in amharic_lines + noise + ["".join(chars)]:
        assert unk not in tok.encode(xtts_text(nfc(text), "am")).ids, text


def test_compression_uses_multi_character_tokens(extended, eval_lines):
    _, out, report = extended
    assert report.train_unk_rate == 0.0
    assert report.train_tokens_per_char < 0.75
    assert report.eval_tokens_per_char is not None and report.eval_tokens_per_char < 0.85  # unseen lines
    assert report.eval_unk_rate == 0.0
    assert report.top_new_tokens and all(len(t) > 1 for t in report.top_new_tokens)
    tok = Tokenizer.from_file(str(out / "vocab.json"))
    pieces = [tok.id_to_token(i) for line in eval_lines for i in tok.encode(xtts_text(line, "am")).ids]
    amharic = [p for p in pieces if is_ethiopic(p[0])]
    in_merged = sum(len(p) for p in amharic if len(p) > 1)
    assert in_merged > 0.35 * sum(map(len, amharic))  # unseen Amharic: many letters travel in merged tokens


def test_report_json_is_written_with_the_definition(extended):
    _, out, report = extended
    saved = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert saved == json.loads(json.dumps(report.to_dict()))
    assert saved["fingerprint"] == vocab_fingerprint(out / "vocab.json")
    assert "[SPACE]" in saved["tokens_per_char_definition"] and "spaces included" in saved["tokens_per_char_definition"]


def test_build_is_deterministic(tiny_vocab, train_lines, tmp_path, nfc):
    a = build_extended_vocab(tiny_vocab, train_lines, 800, tmp_path / "a", normalizer=nfc, min_frequency=2)
    b = build_extended_vocab(tiny_vocab, train_lines, 800, tmp_path / "b", normalizer=nfc, min_frequency=2)
    assert a.fingerprint == b.fingerprint


def test_training_words_are_the_words_encode_sees(extended, amharic_lines):
    """Training on xtts_words(text) is training on exactly the pieces encode() hands to BPE."""
    _, out, _ = extended
    tok = Tokenizer.from_file(str(out / "vocab.json"))
    for text in amharic_lines[:50] + ["የBBC ዘጋቢ  «ዛሬ» 2014 ዓ.ም. ዶ/ር አበበ!"]:
        fed = xtts_text(text, "am")
        enc = tok.encode(fed)
        spans: dict[int, tuple[int, int]] = {}
        for token, word, (start, end) in zip(enc.tokens, enc.word_ids, enc.offsets):
            if token not in ("[am]", "[SPACE]"):  # [UNK] pieces stay: their offsets still count
                first, _ = spans.get(word, (start, end))
                spans[word] = (first, end)
        assert [fed[a:b] for a, b in spans.values()] == xtts_words(text)


def test_latin_in_amharic_text_never_yields_latin_only_merges(tiny_vocab, tmp_path, nfc):
    texts = [f"የhello ዘጋቢ hello world {w} the brown fox" for w in ("ሰላም", "ዓለም", "ቤት", "ሰላም")] * 20
    build_extended_vocab(tiny_vocab, texts, 600, tmp_path, normalizer=nfc, min_frequency=2)
    base, ext = read_vocab(tiny_vocab), read_vocab(tmp_path / "vocab.json")
    for left, right in ext.merges[len(base.merges) :]:
        assert any(is_ethiopic(c) or c not in base.single_characters() for c in left + right)


def test_minimum_new_tokens_is_named(tiny_vocab, train_lines, tmp_path, nfc):
    with pytest.raises(TokenizerError) as err:
        build_extended_vocab(tiny_vocab, train_lines, 100, tmp_path, normalizer=nfc, min_frequency=2)
    msg = str(err.value)
    assert "\n" not in msg and str(tiny_vocab) in msg
    assert "at least 496" in msg and "495 Ethiopic" in msg and "tokenizer.new_tokens" in msg
    report = build_extended_vocab(tiny_vocab, train_lines, 496, tmp_path, normalizer=nfc, min_frequency=2)
    assert report.new_tokens_added == 496 and report.merges_added == 0


def test_other_new_characters_count_toward_the_minimum(tiny_vocab, tmp_path, nfc):
    with pytest.raises(TokenizerError, match="at least 498 .*2 other new characters"):
        build_extended_vocab(tiny_vocab, ["«ሰላም»"], 497, tmp_path, normalizer=nfc, min_frequency=2)


def test_fewer_merges_than_asked_is_reported_not_faked(tiny_vocab, train_lines, tmp_path, nfc):
    report = build_extended_vocab(tiny_vocab, train_lines, 4000, tmp_path, normalizer=nfc, min_frequency=2)
    assert report.new_tokens_added < 4000 and report.requested_new_tokens == 4000
    assert report.notes and "min_frequency=2" in report.notes[0]
    chars_only = build_extended_vocab(tiny_vocab, train_lines, 4000, tmp_path / "c", normalizer=nfc, min_frequency=10**9)
    assert chars_only.merges_added == 0 and chars_only.new_tokens_added == 496


def test_extending_an_extended_vocab_adds_only_merges(extended, train_lines, tmp_path, nfc):
    _, out, first = extended
    again = build_extended_vocab(out / "vocab.json", train_lines, 50, tmp_path, normalizer=nfc, min_frequency=2)
    assert again.characters_added == 0 and again.base_vocab_size == first.vocab_size
    assert again.new_tokens_added <= 50


def test_normalizer_is_applied_before_training(tiny_vocab, tmp_path):
    def fold(text: str) -> str:
        return text.replace("ሐ", "ሀ")

    report = build_extended_vocab(tiny_vocab, ["ሐሰት ሐሰት ሐሰት"] * 3, 600, tmp_path, normalizer=fold, min_frequency=2)
    vocab = read_vocab(tmp_path / "vocab.json").vocab
    assert "ሀሰት" in vocab and "ሐሰት" not in vocab and report.train_characters == 3 * 11


@pytest.mark.parametrize(
    "content, expected",
    [
        (None, "not found"),
        ("{not json", "not valid JSON"),
        ('{"model": {"type": "WordPiece", "vocab": {}}}', "not a BPE tokenizer"),
        ('{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "added_tokens": []}', "lacks the XTTS special tokens"),
    ],
)
def test_bad_base_vocab_is_one_line_naming_the_file(tmp_path, content, expected, nfc):
    path = tmp_path / "vocab.json"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(TokenizerError, match=expected) as err:
        build_extended_vocab(path, ["ሰላም"], 600, tmp_path / "out", normalizer=nfc, min_frequency=2)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_no_usable_training_text_is_an_error(tiny_vocab, tmp_path, nfc):
    with pytest.raises(TokenizerError, match="no training text"):
        build_extended_vocab(tiny_vocab, ["", "   "], 600, tmp_path, normalizer=nfc, min_frequency=2)


def test_two_thousand_tokens_on_three_thousand_lines_takes_seconds(tiny_vocab, tmp_path, nfc):
    import time

    rng = random.Random(0)
    chars = ethiopic_characters()[:300]
    lexicon = ["".join(rng.choices(chars, k=rng.randint(2, 7))) for _ in range(4000)]
    weights = [1 / (rank + 1) for rank in range(len(lexicon))]  # Zipf-like, as in real text
    lines = [" ".join(rng.choices(lexicon, weights, k=rng.randint(6, 16))) + "።" for _ in range(3000)]
    started = time.perf_counter()
    report = build_extended_vocab(tiny_vocab, lines, 2000, tmp_path, normalizer=nfc, min_frequency=2)
    assert time.perf_counter() - started < 10
    assert report.new_tokens_added == 2000 and report.train_unk_rate == 0.0


def test_merge_budget_is_filled_even_when_many_learned_merges_are_dropped():
    """Frequent Latin-only pairs are learned first and dropped; training repeats until the budget is met."""
    from xtts_ft.tokenizer.bpe import learn_merges, target_words

    rng = random.Random(5)
    latin = ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=8)) for _ in range(60)]
    amharic = ["".join(rng.choices(ethiopic_characters()[:200], k=5)) for _ in range(80)]
    texts = [f"የ{w} " * 30 for w in latin] + [f"{w} {w} {w}" for w in amharic]
    base_tokens = set("abcdefghijklmnopqrstuvwxyz")
    known = base_tokens | set(ethiopic_characters())

    def is_target(c: str) -> bool:
        return is_ethiopic(c)

    kept = learn_merges(target_words(texts, is_target), 150, min_frequency=2, known_tokens=known, is_target=is_target)
    assert sum(makes_new for _, _, makes_new in kept) == 150
    assert all(any(is_ethiopic(c) for c in a + b) for a, b, _ in kept)
