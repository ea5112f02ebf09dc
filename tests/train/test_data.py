"""Data: up-front validation with counted rejections, deterministic items and crops, the resumable sampler."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf
import torch

from tests.train.trainhelpers import SR, write_csv, write_wav
from xtts_ft.errors import DataError
from xtts_ft.train.data import ClipDataset, Limits, collate, crop_bounds, load_clips, make_loader
from xtts_ft.train.sampler import ItemKey, ResumableBatchSampler

LIMITS = Limits(max_text_tokens=30, max_audio_tokens=40, code_stride=1024, sample_rate=SR)


def test_every_rejected_clip_is_counted_by_reason(tmp_path, tokenizer):
    (tmp_path / "w").mkdir()
    for name, seconds in [("ok1", 1.0), ("ok2", 1.5), ("short", 0.2), ("long", 2.0)]:
        write_wav(tmp_path / f"w/{name}.wav", seconds, seed=1)
    sf.write(str(tmp_path / "w/rate.wav"), np.zeros(SR), 16000)
    (tmp_path / "w/garbage.wav").write_bytes(b"RIFF....not really a wav")
    rows = [
        ("w/ok1.wav", "the quick brown fox"),
        ("w/ok2.wav", "she sells sea shells"),
        ("w/short.wav", "the lazy dog"),
        ("w/long.wav", "the lazy dog"),  # 2 s -> 44 codes + 3 > 40 audio tokens
        ("w/rate.wav", "the lazy dog"),
        ("w/garbage.wav", "the lazy dog"),
        ("w/missing.wav", "the lazy dog"),
        ("w/ok1.wav", "the lazy dog 42"),  # digits are not in the tiny vocabulary -> [UNK]
        ("w/ok1.wav", " ".join(["peter piper"] * 10)),
        ("w/ok1.wav", "   "),
    ]
    clips, report = load_clips(write_csv(tmp_path / "m.csv", rows), tokenizer, "am", LIMITS, progress=False)
    assert [c.audio_path.name for c in clips] == ["ok1.wav", "ok2.wav"]
    assert report.total == 10 and report.kept == 2
    assert report.rejected == {
        "audio_too_short": 1, "audio_too_long": 1, "wrong_sample_rate": 1, "unreadable_audio": 2,
        "unknown_token": 1, "text_too_long": 1, "empty_text": 1,
    }
    assert "w/missing.wav" in report.examples["unreadable_audio"]
    assert "unreadable_audio 2" in report.summary()
    assert clips[0].tokens[0] >= 143 - 0 and len(clips[0].sha256) == 64  # [am] is a new token


def test_missing_csv_or_header_is_a_data_error(tmp_path, tokenizer):
    with pytest.raises(DataError, match="not found"):
        load_clips(tmp_path / "nope.csv", tokenizer, "am", LIMITS)
    (tmp_path / "bad.csv").write_text("file,text\nx,y\n")
    with pytest.raises(DataError, match="audio_file"):
        load_clips(tmp_path / "bad.csv", tokenizer, "am", LIMITS)


def test_crops_follow_coqui_and_are_deterministic_per_position(dataset, tokenizer):
    clips, _ = load_clips(dataset[0], tokenizer, "am", Limits(30, 500, 1024, SR), progress=False)
    ds = ClipDataset(clips, sample_rate=SR, cond_min_s=0.4, cond_max_s=0.8, seed=5, train=True)
    a, b = ds[ItemKey(0, 0, 3, 1, 0)], ds[ItemKey(0, 0, 3, 1, 0)]
    assert torch.equal(a["cond_idxs"], b["cond_idxs"]) and torch.equal(a["conditioning"], b["conditioning"])
    starts = {tuple(ds[ItemKey(0, e, 3, 1, 0)]["cond_idxs"].tolist()) for e in range(8)}
    assert len(starts) > 1  # redrawn per epoch
    for e in range(8):
        s, t = ds[ItemKey(0, e, 0, 0, 0)]["cond_idxs"].tolist()
        assert int(0.4 * SR) <= t - s <= int(0.8 * SR) and 0 <= s and t <= clips[0].num_samples
    ev = ClipDataset(clips, sample_rate=SR, cond_min_s=0.4, cond_max_s=0.8, seed=5, train=False)
    assert ev[ItemKey(0, 0, 0, 0, 0)]["cond_idxs"].tolist() == [0, (int(0.4 * SR) + int(0.8 * SR)) // 2]
    assert crop_bounds(1000, 3000, 6000, None) == (0, 500)  # shorter than the prompt: half the clip
    batch = collate([ds[ItemKey(i, 0, 0, i, 0)] for i in range(3)])
    assert batch["padded_text"].dtype == torch.int32 and batch["wav"].shape[:2] == (3, 1)
    assert batch["conditioning"].shape == (3, 1, 1, int(0.8 * SR)) and batch["cond_idxs"].shape == (3, 2)
    assert batch["wav"].shape[-1] == max(clips[i].num_samples for i in range(3))


def test_sampler_shards_shuffles_and_resumes_exactly():
    lengths = list(range(100, 124))  # 24 clips
    ranks = [ResumableBatchSampler(lengths, 4, seed=3, rank=r, world_size=2, bucketing=True) for r in range(2)]
    assert ranks[0].batches_per_epoch == ranks[1].batches_per_epoch == 3
    e0 = [set(i for b in s.epoch_batches(0) for i in b) for s in ranks]
    assert not e0[0] & e0[1] and len(e0[0] | e0[1]) == 24  # disjoint shards covering every clip
    odd = [ResumableBatchSampler(lengths[:23], 4, seed=3, rank=r, world_size=2) for r in range(2)]
    assert [len(s.epoch_batches(0)) for s in odd] == [3, 3]  # 23 clips: 12 per rank (one wrapped), 3 batches each
    assert ranks[0].epoch_batches(0) != ranks[0].epoch_batches(1)  # reshuffled per epoch
    for batch in ranks[0].epoch_batches(0):  # bucketed: sorted by length inside a batch
        assert [lengths[i] for i in batch] == sorted(lengths[i] for i in batch)
    straight = ResumableBatchSampler(lengths, 4, seed=3)
    it = iter(straight)
    seq = [next(it) for _ in range(13)]
    pos = straight.next_position(seq[6][0].epoch, seq[6][0].batch_index)
    resumed = iter(ResumableBatchSampler(lengths, 4, seed=3, start=pos))
    assert [next(resumed) for _ in range(6)] == seq[7:13]
    with pytest.raises(DataError, match="batch_size"):
        ResumableBatchSampler([1, 2, 3], 4, seed=0)


def test_worker_processes_give_the_same_batches(dataset, tokenizer):
    clips, _ = load_clips(dataset[0], tokenizer, "am", Limits(30, 500, 1024, SR), progress=False)
    ds = ClipDataset(clips, sample_rate=SR, cond_min_s=0.4, cond_max_s=0.8, seed=5, train=True)
    out = []
    for workers in (0, 1):
        sampler = ResumableBatchSampler([c.num_samples for c in clips], 2, seed=1, start=(0, 2))
        it = iter(make_loader(ds, sampler, num_workers=workers, base_seed=7, pin_memory=False))
        out.append([next(it) for _ in range(3)])
        del it
    for a, b in zip(*out):
        assert a["position"] == b["position"] and torch.equal(a["conditioning"], b["conditioning"])
        assert torch.equal(a["padded_text"], b["padded_text"])
    assert out[0][0]["position"] == (0, 2)
