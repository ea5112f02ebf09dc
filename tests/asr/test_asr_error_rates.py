"""Amharic-aware error rates on hand-made pairs."""

from __future__ import annotations

import pytest

from xtts_ft.text.error_rates import corpus_cer, edit_distance, error_rates, scoring_text


def test_homophone_letters_are_not_errors():
    # ሠ/ሰ, ዐ/አ, ኀ/ሐ/ሀ, ፀ/ጸ sound the same: a recogniser cannot tell them apart.
    r = error_rates("ሠላም ዓለም ኀይል ፀሐይ", "ሰላም አለም ሀይል ጸሀይ")
    assert r.cer == 0.0 and r.wer == 0.0


def test_numbers_are_read_out_on_both_sides():
    r = error_rates("በ2015 ተመረቀ", "በሁለት ሺህ አስራ አምስት ተመረቀ")
    assert r.cer == 0.0
    assert scoring_text("3") == "ሶስት"


def test_punctuation_is_dropped():
    assert error_rates("ሰላም፣ እንዴት ነህ?", "ሰላም እንዴት ነህ").cer == 0.0


def test_spaces_count_in_cer_but_not_in_cer_no_space():
    r = error_rates("ቤት ውስጥ", "ቤትውስጥ")
    assert r.cer == pytest.approx(1 / 6)  # one deleted space over 6 characters (ቤ ት space ው ስ ጥ)
    assert r.cer_no_space == 0.0
    assert r.wer == 1.0  # two reference words: one substitution, one deletion


def test_one_wrong_letter():
    r = error_rates("ሰላም", "ሰላሙ")
    assert r.cer == pytest.approx(1 / 3)
    assert r.wer == 1.0


def test_empty_texts():
    assert error_rates("", "").cer == 0.0
    assert error_rates("", "ሰላም").cer == 1.0
    assert error_rates("ሰላም", "").cer == 1.0
    assert error_rates("።", "").cer == 0.0  # nothing left to say after normalising


def test_cer_can_exceed_one_when_the_recogniser_babbles():
    assert error_rates("ሰላም", "ሰላም ሰላም ሰላም").cer > 1.0


def test_edit_distance_and_corpus_cer():
    assert edit_distance("kitten", "sitting") == 3
    assert edit_distance([], ["a"]) == 1
    # corpus CER weighs by reference length: (0 + 3 edits) / (3 + 3 characters)
    assert corpus_cer([("ሰላም", "ሰላም"), ("ቤቱን", "")]) == pytest.approx(0.5)
