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
