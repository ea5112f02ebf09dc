"""What ``MainFirst.share`` sends from rank 0 (a resume's checkpoint state) arrives whole on the other ranks: every
tensor, of any dtype and size, back in its place, the rest as it was, however the bytes fall into buckets.

The two sides run here one after the other, with ``dist.broadcast`` replaced by a recorder and a player of the
buckets (what the gloo group carries between two processes; tests/train/test_several_machines.py runs the real one).
"""

from __future__ import annotations

import torch

from xtts_ft.train import distributed
from xtts_ft.train.distributed import DistContext, MainFirst


def state() -> dict:
    gen = torch.Generator().manual_seed(0)
    return {
        "step": 6,
        "gpt": {"w": torch.randn(5, 7, generator=gen), "b": torch.randn(3, generator=gen).to(torch.bfloat16),
                "empty": torch.zeros(0, 4)},
        "optimizer": {"state": {0: {"step": torch.tensor(6.0), "exp_avg": torch.randn(5, 7, generator=gen)}},
                      "param_groups": [{"lr": 1e-3, "params": [0]}]},
        "rng": [{"torch": torch.randint(0, 255, (17,), dtype=torch.uint8, generator=gen), "python": [3, [1, 2], None]}],
        "mask": torch.tensor([True, False, True]),
        "ids": (torch.arange(9, dtype=torch.int64).reshape(3, 3), "kept as is"),
    }


def assert_same(a, b) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            assert_same(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    else:
        assert a == b


def test_every_tensor_of_a_checkpoint_state_arrives_in_its_place_across_bucket_edges(monkeypatch):
    buckets: list[torch.Tensor] = []
    monkeypatch.setattr(distributed.dist, "broadcast", lambda t, src, group: buckets.append(t.clone()))
    sent = state()
    tensors: list[torch.Tensor] = []
    skeleton = distributed._without_tensors(sent, tensors)
    # 13-byte buckets: tensors are split across buckets and buckets hold pieces of several tensors
    distributed._stream_bytes([t.contiguous() for t in tensors], group=None, send=True, bucket_bytes=13)
    assert len(buckets) > 10 and sum(b.numel() for b in buckets) == sum(t.numel() * t.element_size() for t in tensors)

    played = iter(buckets)
    monkeypatch.setattr(distributed.dist, "broadcast", lambda t, src, group: t.copy_(next(played)))
    received: list[torch.Tensor] = []
    room = distributed._make_room(skeleton, received)
    distributed._stream_bytes(received, group=None, send=False, bucket_bytes=13)
    assert next(played, None) is None
    assert_same(sent, distributed._with_tensors(room, received))


def test_one_process_shares_with_itself_without_a_group():
    ctx = DistContext(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"), initialized_here=False)
    value = state()
    assert MainFirst(ctx).share("the checkpoint", lambda: value) is value
