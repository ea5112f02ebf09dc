"""Greedy CTC decoding on constructed frame ids and logits."""

from __future__ import annotations

import torch

from xtts_ft.asr.recognizer import greedy_ctc_decode

VOCAB = {0: "<pad>", 1: "<unk>", 2: "|", 3: "ሰ", 4: "ላ", 5: "ም", 6: "ቤ", 7: "ት"}


def decode(ids):
    return greedy_ctc_decode(ids, blank_id=0, id_to_token=VOCAB, word_delimiter="|", skip_ids=frozenset({1}))


def test_repeats_merge_blanks_vanish():
    assert decode([3, 3, 0, 4, 4, 4, 0, 0, 5]) == "ሰላም"


def test_a_blank_between_repeats_keeps_both():
    assert decode([7, 0, 7]) == "ትት"
    assert decode([7, 7]) == "ት"


def test_word_delimiter_is_one_space_and_edges_are_trimmed():
    assert decode([2, 3, 4, 5, 2, 2, 0, 2, 6, 7, 2]) == "ሰላም ቤት"


def test_unknown_and_empty():
    assert decode([1, 3, 1]) == "ሰ"
    assert decode([0, 0, 0]) == ""
    assert decode([]) == ""


def test_from_logits_argmax():
    # frames: ሰ ሰ blank ላ ም ም | ቤ ት ; the logits make the intended id the clear maximum
    path = [3, 3, 0, 4, 5, 5, 2, 6, 7]
    logits = torch.full((len(path), len(VOCAB)), -5.0)
    for t, i in enumerate(path):
        logits[t, i] = 5.0
        logits[t, (i + 1) % len(VOCAB)] = 4.0  # a close runner-up must not win
    assert decode(logits.argmax(-1).tolist()) == "ሰላም ቤት"
