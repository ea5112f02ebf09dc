"""Out of memory that is not torch.OutOfMemoryError: cuDNN/cuFFT/cuBLAS workspace failures are plain
RuntimeErrors. The batch-size probe and the out-of-memory split classify them as out of memory (one
classifier); an unrelated RuntimeError is still raised."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from xtts_ft.train.memory import find_batch_size, is_out_of_memory
from xtts_ft.train.oom import MicroBatchRunner

CPU = torch.device("cpu")
# the messages as torch 2.8 words them on a GPU (cuDNN frontend, cuFFT plan, cuBLAS handle, raw CUDA)
WORKSPACE_ERRORS = [
    "GET was unable to find an engine to execute this computation",
    "cuFFT error: CUFFT_ALLOC_FAILED",
    "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
    "cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
    "CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported at some other API call",
]
UNRELATED = RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x3 and 5x1)")


@pytest.mark.parametrize("message", WORKSPACE_ERRORS)
def test_workspace_failures_are_out_of_memory(message):
    assert is_out_of_memory(RuntimeError(message))


def test_other_errors_are_not_out_of_memory():
    assert is_out_of_memory(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert not is_out_of_memory(UNRELATED)
    assert not is_out_of_memory(RuntimeError("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED"))  # not a memory failure
    assert not is_out_of_memory(ValueError("CUFFT_ALLOC_FAILED"))  # only RuntimeErrors carry these


@pytest.mark.parametrize("message", WORKSPACE_ERRORS[:3])
def test_the_batch_size_probe_records_a_workspace_failure_as_does_not_fit(message):
    tried = []

    def try_batch(n: int) -> None:
        tried.append(n)
        if n > 5:
            raise RuntimeError(message)

    choice = find_batch_size(try_batch, CPU, 16, probe=True)
    assert (choice.largest_fit, choice.first_oom, choice.size) == (5, 6, 4)
    assert tried == [1, 2, 4, 8, 6, 5]

    def broken(n: int) -> None:
        raise UNRELATED

    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        find_batch_size(broken, CPU, 8, probe=True)


class _Counters:
    oom_split = 0
    oom_skipped = 0


def _run(error: RuntimeError):
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    batch = {"clips": torch.arange(4), "x": torch.randn(4, 3), "y": torch.randn(4)}

    def forward(piece):
        if len(piece["clips"]) > 2:
            raise error
        loss = ((model(piece["x"]).squeeze(-1) - piece["y"]) ** 2).mean()
        return loss, torch.stack([loss.detach()] * 3)

    counters = _Counters()
    runner = MicroBatchRunner(counters=counters, device=CPU, describe=lambda piece: str(piece["clips"].tolist()),
                              zero_grads=lambda: model.zero_grad(set_to_none=True))
    runner.begin()
    runner.run(batch, 1.0 / 4, forward, lambda loss: loss.backward(), step=0)
    return runner.finish([p.grad for p in model.parameters()]), counters


def test_the_out_of_memory_split_handles_a_workspace_failure_and_raises_anything_else():
    counted, counters = _run(RuntimeError(WORKSPACE_ERRORS[1]))
    assert counted == 4 and counters.oom_split == 1 and counters.oom_skipped == 0  # 4 -> 2 + 2, every clip counted
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        _run(UNRELATED)
