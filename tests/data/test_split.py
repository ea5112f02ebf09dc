"""The train/eval split: deterministic, stable when clips are added, capped, speaker-aware."""

from __future__ import annotations

from xtts_ft.data.split import hash_fraction, split_clips


def _clips(n: int, speakers: int = 1, start: int = 0):
    return [(f"wavs/clip_{i:05d}.wav", f"spk{i % speakers}") for i in range(start, start + n)]


def test_split_is_deterministic_and_near_the_fraction():
    clips = _clips(2000)
    a = split_clips(clips, 0.1, 10_000).eval_ids
    assert a == split_clips(list(reversed(clips)), 0.1, 10_000).eval_ids
    assert 150 <= len(a) <= 250
    assert all(hash_fraction(c) < 0.1 for c in a)


def test_adding_clips_moves_no_existing_clip():
    old = _clips(500)
    new = old + _clips(300, start=500)
    before = split_clips(old, 0.1, 10_000).eval_ids
    after = split_clips(new, 0.1, 10_000).eval_ids
    old_ids = {c for c, _ in old}
    assert after & old_ids == before


def test_cap_keeps_the_lowest_hashes():
    clips = _clips(1000)
    capped = split_clips(clips, 0.2, 25).eval_ids
    assert len(capped) == 25
    full = sorted(split_clips(clips, 0.2, 10_000).eval_ids, key=hash_fraction)
    assert capped == set(full[:25])


def test_tiny_sets_get_one_eval_and_keep_train():
    two = _clips(2)
    assert len(split_clips(two, 0.05, 10).eval_ids) == 1
    assert len(split_clips(two, 0.99, 10).eval_ids) == 1  # never every clip in eval
    assert split_clips(two, 0.0, 10).eval_ids == set()
    assert split_clips(_clips(1), 0.5, 10).eval_ids == set()


def test_split_by_speaker_puts_every_multi_clip_speaker_in_both():
    clips = _clips(60, speakers=6) + [("wavs/solo.wav", "solo")]
    split = split_clips(clips, 0.05, 1000, by_speaker=True)
    speaker_of = dict(clips)
    for spk in {s for _, s in clips} - {"solo"}:
        ids = {c for c, s in clips if s == spk}
        assert ids & split.eval_ids and ids - split.eval_ids, spk
    assert "wavs/solo.wav" not in split.eval_ids
    assert split.speakers_without_eval == []
    capped = split_clips(clips, 0.05, 4, by_speaker=True)
    assert len(capped.eval_ids) == 4
    assert len({speaker_of[c] for c in capped.eval_ids}) == 4  # one clip per speaker before any second one
    assert len(capped.speakers_without_eval) == 2
