"""Sentences split at Amharic punctuation and spelled in the recogniser's letters."""

from __future__ import annotations

from xtts_ft.ingest.text_units import Speller, split_sentences


def test_sentences_end_at_ethiopic_and_latin_marks_and_line_breaks():
    text = "ሰላም ነው። እንዴት ነህ? ደህና ነኝ! ጥያቄ፧ ክፍል፨ አሮጌ፡፡ ሌላ\nአዲስ መስመር፣ ቀጥሎ"
    assert split_sentences(text) == ["ሰላም ነው።", "እንዴት ነህ?", "ደህና ነኝ!", "ጥያቄ፧", "ክፍል፨", "አሮጌ፡፡", "ሌላ",
                                     "አዲስ መስመር፣ ቀጥሎ"]
    assert split_sentences("\n\n  \n") == []


def test_letters_are_the_scoring_text_and_unknown_letters_are_counted():
    vocab = {"<pad>": 0, "|": 1, "ሰ": 2, "ላ": 3, "ም": 4, "ሁ": 5, "ለ": 6, "ት": 7}
    speller = Speller(vocab, "|")
    unit = speller.unit(0, "ሠላም 2 x።")  # ሠ folds to ሰ; 2 is read as ሁለት; x has no id
    assert unit.targets == [2, 3, 4, 1, 5, 6, 7]
    assert unit.word_starts == [0, 4] and unit.words == ["ሰላም", "ሁለት"]
    assert unit.unknown == {"x": 1}


def test_unfolded_homophone_letters_back_the_folded_letter_the_text_asks_for():
    import numpy as np

    from xtts_ft.ingest.analysis import fold_columns, homophone_columns

    vocab = {"<pad>": 0, "|": 1, "ሰ": 2, "ሠ": 3, "ለ": 4, "ሐ": 5}  # ሐ folds to ሀ, which it lacks: kept
    pairs = homophone_columns(vocab)
    assert pairs == [(3, 2)]
    probs = np.log(np.array([[0.1, 0.1, 0.2, 0.5, 0.05, 0.05]], np.float32))
    folded = np.exp(fold_columns(probs.copy(), pairs))
    assert np.allclose(folded, [[0.1, 0.1, 0.7, 0.0, 0.05, 0.05]], atol=1e-6)
