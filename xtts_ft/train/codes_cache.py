"""DVAE code cache: the target audio's codes, computed once instead of on every step.

coqui's GPT trainer runs the ~50 M-parameter DVAE over every target clip at every step, although
the codes are deterministic. With ``training.cache_dvae_codes`` the codes of each clip are computed
once, in the main process, on the training device, in length-sorted batches, and stored as
``<run_dir>/cache/dvae_codes/<audio sha256[:24]>_<dvae fingerprint>.npy`` (int16). The key holds the
audio file's hash and a fingerprint of the DVAE weights and the mel settings in front of it, so a
changed clip or model never reuses stale codes; clips added later are computed on the next run.

Both paths compute codes the same way so they are interchangeable: every clip is followed by
``CODE_TAIL_PAD`` zero samples before the DVAE. The DVAE and its mel front end are local
(convolutions and frame-wise STFT), so a code only sees samples near it; with that much silence
after the clip its last codes no longer depend on how much more padding a batch adds. Only the
first ``ceil(samples / code_stride)`` codes are kept: the GPT replaces everything after them with
the stop token (``set_mel_padding``).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import math
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from xtts_ft.audio_io import DATASET_RATE
from xtts_ft.model import XttsTrainingModel
from xtts_ft.tempfiles import atomic_write
from xtts_ft.train.data import Clip, read_segment

log = logging.getLogger(__name__)

CODE_TAIL_PAD = 2048  # zero samples after every clip (two code strides; one already suffices for the XTTS DVAE)
MAX_BATCH_CLIPS = 16
MAX_BATCH_SAMPLES = 16 * DATASET_RATE * 12  # padded samples per DVAE batch


def dvae_fingerprint(model: XttsTrainingModel) -> str:
    """sha256 over the DVAE weights, the DVAE mel front end and the code stride (16 hex chars)."""
    h = hashlib.sha256()
    tensors = {f"dvae.{k}": v for k, v in model.dvae.state_dict().items()}
    tensors.update({f"mel.{k}": v for k, v in model.mel_dvae.state_dict().items()})
    for key in sorted(tensors):
        t = tensors[key].detach().to("cpu").contiguous()
        h.update(f"{key}:{tuple(t.shape)}:{t.dtype}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    h.update(f"stride={model.xtts.args.gpt_code_stride_len}".encode())
    return h.hexdigest()[:16]


def num_codes(num_samples: int, code_stride: int) -> int:
    return math.ceil(num_samples / code_stride)


@torch.no_grad()
def codes_for_batch(model: XttsTrainingModel, wav: torch.Tensor) -> torch.Tensor:
    """Codes of a zero-padded (B, 1, T) batch, the per-step path (no cache)."""
    return model.audio_codes(F.pad(wav, (0, CODE_TAIL_PAD)))


def cache_paths(clips: Sequence[Clip], cache_dir: Path, fingerprint: str) -> list[Path]:
    return [cache_dir / f"{clip.sha256[:24]}_{fingerprint}.npy" for clip in clips]


def _is_valid(path: Path, expected: int) -> bool:
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError):
        return False
    return bool(arr.shape == (expected,))


def build_codes_cache(
    model: XttsTrainingModel,
    clips: Sequence[Clip],
    cache_dir: Path,
    device: torch.device,
    *,
    progress: bool = True,
    should_stop: Optional[Callable[[], bool]] = None,
) -> list[Path]:
    """Make sure every clip has cached codes; compute the missing ones. Returns one path per clip."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    stride = int(model.xtts.args.gpt_code_stride_len)
    paths = cache_paths(clips, cache_dir, dvae_fingerprint(model))
    todo = [i for i, (c, p) in enumerate(zip(clips, paths)) if not _is_valid(p, num_codes(c.num_samples, stride))]
    todo.sort(key=lambda i: clips[i].num_samples)
    if not todo:
        log.info("DVAE code cache: all %d clips cached in %s", len(clips), cache_dir)
        return paths
    log.info("DVAE code cache: computing codes of %d of %d clips on %s", len(todo), len(clips), device)
    batches: list[list[int]] = []
    current: list[int] = []
    for i in todo:  # ascending length: the last clip of a batch is its longest
        full = len(current) >= MAX_BATCH_CLIPS or (len(current) + 1) * clips[i].num_samples > MAX_BATCH_SAMPLES
        if current and full:
            batches.append(current)
            current = []
        current.append(i)
    batches.append(current)
    for batch in tqdm(batches, desc="DVAE codes", disable=None if progress else True, leave=False):
        if should_stop is not None and should_stop():
            break
        longest = max(clips[i].num_samples for i in batch)
        wav = torch.zeros(len(batch), 1, longest)
        for row, i in enumerate(batch):
            wav[row, 0, : clips[i].num_samples] = torch.from_numpy(read_segment(clips[i].audio_path, 0, None))
        codes = codes_for_batch(model, wav.to(device)).to("cpu")
        for row, i in enumerate(batch):
            n = num_codes(clips[i].num_samples, stride)
            atomic_write(paths[i], functools.partial(np.save, arr=codes[row, :n].numpy().astype(np.int16)))
    return paths
