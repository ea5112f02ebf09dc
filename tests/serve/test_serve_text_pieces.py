"""Long text is cut at sentence, then clause marks, then words; every piece fits; tiny sentences are joined."""

from __future__ import annotations

from xtts_ft.serve.text_pieces import split_pieces


def fits_30(piece: str) -> bool:
    return len(piece) <= 30


def test_sentences_stay_apart_when_long_enough():
    text = "ዛሬ የአየሩ ሁኔታ በጣም ጥሩ ነው. ኢትዮጵያ ጥንታዊ ሀገር ናት? ብዙ ሰዎች ወደ ገበያ ሄዱ!"
    assert split_pieces(text, fits_30, 10) == ["ዛሬ የአየሩ ሁኔታ በጣም ጥሩ ነው.", "ኢትዮጵያ ጥንታዊ ሀገር ናት?", "ብዙ ሰዎች ወደ ገበያ ሄዱ!"]


def test_a_long_sentence_is_cut_at_clause_marks_then_words():
    text = "ዛሬ የአየሩ ሁኔታ በጣም ጥሩ ነው, እና ደግሞ ብዙ ሰዎች ወደ ገበያ ሄዱ; " + "ቃል " * 20 + "መጨረሻ."
    pieces = split_pieces(text, fits_30, 10)
    assert pieces[0] == "ዛሬ የአየሩ ሁኔታ በጣም ጥሩ ነው," and pieces[1] == "እና ደግሞ ብዙ ሰዎች ወደ ገበያ ሄዱ;"
    assert all(fits_30(p) for p in pieces) and " ".join(pieces) == " ".join(text.split())


def test_one_overlong_word_is_cut_by_characters():
    pieces = split_pieces("ሀ" * 70, fits_30, 10)
    assert [len(p) for p in pieces] == [30, 30, 10]


def test_short_sentences_are_joined_to_a_neighbour():
    assert split_pieces("ሰላም. እንዴት ነህ? ዛሬ የአየሩ ሁኔታ ጥሩ ነው.", fits_30, 20) == ["ሰላም. እንዴት ነህ?", "ዛሬ የአየሩ ሁኔታ ጥሩ ነው."]
    assert split_pieces("   ", fits_30, 20) == []
