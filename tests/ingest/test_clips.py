"""Clip planning: long pieces split at their longest pause, short ones merged, cuts in the pauses."""

from __future__ import annotations

from xtts_ft.ingest.clips import Piece, plan_clips


def _piece(start, end, text="ሰላም", score=0.9, **kw):
    return Piece(0, start, end, text, score, "alignment", **kw)


def test_a_long_sentence_is_split_at_its_longest_word_pause():
    long = _piece(1.0, 15.0, "ሀ ለ መ", inner_pauses=[(4.0, 4.2), (9.0, 9.8)], words=["ሀ", "ለ", "መ"])
    clips = plan_clips([long], [20.0], 0.5, 11.6, 0.3, 0.4)
    assert [(c.text, c.rejection) for c in clips] == [("ሀ ለ", None), ("መ", None)]
    assert clips[0].end == 9.3 and clips[1].start == 9.5  # 0.3 s of the 0.8 s pause each side, not more


def test_short_pieces_merge_with_the_next_but_never_across_lost_text_or_files():
    pieces = [_piece(1.0, 1.3, "ሀ"), _piece(2.0, 4.0, "ለ"), _piece(5.0, 5.2, "መ"),
              _piece(6.0, 8.0, "ረ", joinable=False)]
    clips = plan_clips(pieces, [10.0], 0.5, 11.6, 0.3, 0.4)
    assert [c.text for c in clips] == ["ሀ ለ", "መ", "ረ"]
    assert clips[1].rejection[0] == "too_short"


def test_low_scores_and_unsplittable_pieces_are_rejected_with_a_reason():
    clips = plan_clips([_piece(0.5, 3.0, score=0.2), _piece(4.0, 17.0)], [20.0], 0.5, 11.6, 0.3, 0.4)
    assert clips[0].rejection == ("low_score", "alignment score 0.20 < ingest.min_score 0.4")
    assert clips[1].rejection[0] == "too_long"
