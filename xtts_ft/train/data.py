"""Training data: read the coqui-format CSVs, validate every clip up front, serve deterministic items.

Unlike coqui's ``XTTSDataset`` (which ignores the index, samples at random and swallows every
failed clip with a bare ``except``), every clip is checked once before training and each rejected
clip is counted under its reason and reported; ``__getitem__`` serves exactly the clip it is asked
for and raises :class:`DataError` naming the file if it can no longer be read.

Reasons a clip is rejected: ``unreadable_audio``, ``wrong_sample_rate``, ``audio_too_short``
(< 0.5 s, as coqui), ``audio_too_long`` (its DVAE codes plus start/stop/padding tokens exceed the
model's ``max_audio_tokens``), ``empty_text``, ``text_too_long`` (> ``max_text_tokens`` tokens),
``unknown_token`` ([UNK] in the tokens), ``stop_token`` ([STOP] inside the text).

Conditioning follows XTTS-v2's masking-GT-prompt recipe: the voice prompt is a crop of the target
clip itself (``cond_idxs`` = crop start/end in samples, the GPT masks it out of the loss), its
length drawn from [min_conditioning_s, max_conditioning_s]. Training crops are redrawn for every
use of a clip from a generator seeded by the item's position (seed, epoch, rank, batch, slot), so
they are random per step but identical after a resume and independent of worker processes.
Evaluation uses a fixed crop (mid length, from the start), as coqui does.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import io
import logging
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Protocol, Sequence, TypedDict

import numpy as np
import numpy.typing as npt
import soundfile as sf
import torch
from tqdm import tqdm

from xtts_ft.errors import DataError
from xtts_ft.stop_signals import ignore_stop_signals, raise_if_stopped
from xtts_ft.tokenizer.voice_tokenizer import AmharicTokenizer
from xtts_ft.train.sampler import ItemKey, ResumableBatchSampler


# The keys that are always there; the audio or its cached DVAE codes (one of the two) in the total=False class below
# (typing.NotRequired is Python 3.11's; the package runs on 3.10).
class _ClipItemKeys(TypedDict):
    clip: int  # index into the dataset's clips
    position: tuple[int, int]  # the sampler's (epoch, batch_index) of the batch it is in
    wav_length: int
    text: torch.Tensor  # int32 token ids
    cond_idxs: torch.Tensor  # [start, end] of the conditioning crop in the clip
    conditioning: torch.Tensor  # (1, 1, cond_max) the crop, zero-padded


class ClipItem(_ClipItemKeys, total=False):
    """One clip as :class:`ClipDataset` reads it: its tokens, a conditioning crop, and its audio or DVAE codes."""

    wav: torch.Tensor  # (1, samples) when the codes are not cached
    codes: torch.Tensor  # the cached DVAE codes


class _BatchKeys(TypedDict):
    padded_text: torch.Tensor  # (B, T_text) int32
    text_lengths: torch.Tensor
    wav_lengths: torch.Tensor
    conditioning: torch.Tensor  # (B, 1, 1, T_cond)
    cond_idxs: torch.Tensor
    clips: torch.Tensor  # the clips' indices
    position: tuple[int, int]  # the sampler's (epoch, batch_index) of this batch


class Batch(_BatchKeys, total=False):
    """A collated batch (:func:`collate`): the clips' tensors padded and stacked, and the batch's data position."""

    wav: torch.Tensor  # (B, 1, T)
    codes: torch.Tensor  # (B, T_codes)


class ModelInputs(TypedDict):
    """XttsTrainingModel.forward's keyword arguments on the device (train/step.py ``model_inputs``)."""

    text_inputs: torch.Tensor
    text_lengths: torch.Tensor
    audio_codes: torch.Tensor
    wav_lengths: torch.Tensor
    cond_mels: torch.Tensor
    cond_idxs: Optional[torch.Tensor]  # None in evaluation: the whole clip conditions
    cond_lens: Optional[torch.Tensor]



class BatchInputs(Protocol):
    """``model_inputs(batch, train=)``: a collated batch -> the model's inputs (train/step.py ``model_inputs``)."""

    def __call__(self, batch: Batch, *, train: bool) -> ModelInputs: ...

log = logging.getLogger(__name__)

MIN_CLIP_S = 0.5  # coqui's XTTSDataset drops shorter clips
REQUIRED_COLUMNS = ("audio_file", "text")
STOP_ID, UNK_ID = 0, 1  # XTTS vocabularies: [STOP]=0, [UNK]=1


@dataclass(frozen=True)
class Clip:
    audio_path: Path
    text: str
    speaker: str
    tokens: tuple[int, ...]
    num_samples: int
    sha256: str  # of the audio file's bytes (the DVAE code cache key)
    language: str = ""  # the language token the text was encoded with


class DataReportRecord(TypedDict):
    """:meth:`DataReport.to_dict`: the report as plain data (``TrainResult.data_reports``)."""

    csv: str
    total: int
    kept: int
    kept_seconds: float
    rejected: dict[str, int]
    examples: dict[str, list[str]]
    languages: dict[str, int]


@dataclass
class DataReport:
    """What happened to every row of one CSV."""

    csv: str
    total: int = 0
    kept: int = 0
    kept_seconds: float = 0.0
    rejected: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)  # reason -> first few files
    languages: dict[str, int] = field(default_factory=dict)  # kept clips per language

    def reject(self, reason: str, what: str) -> None:
        self.rejected[reason] = self.rejected.get(reason, 0) + 1
        self.examples.setdefault(reason, [])
        if len(self.examples[reason]) < 3:
            self.examples[reason].append(what)

    def summary(self) -> str:
        head = f"{self.csv}: {self.kept}/{self.total} clips usable ({self.kept_seconds / 60:.1f} min)"
        if len(self.languages) > 1:
            head += " (" + ", ".join(f"{lang} {n}" for lang, n in sorted(self.languages.items())) + ")"
        if not self.rejected:
            return head
        parts = [f"{reason} {n} (e.g. {', '.join(self.examples[reason])})"
                 for reason, n in sorted(self.rejected.items())]
        return head + "; rejected: " + "; ".join(parts)

    def to_dict(self) -> DataReportRecord:
        return {"csv": self.csv, "total": self.total, "kept": self.kept, "kept_seconds": round(self.kept_seconds, 2),
                "rejected": dict(self.rejected), "examples": {k: list(v) for k, v in self.examples.items()},
                "languages": dict(self.languages)}


@dataclass(frozen=True)
class Limits:
    """What the model accepts (from ``xtts_ft.model.model_limits``)."""

    max_text_tokens: int
    max_audio_tokens: int
    code_stride: int
    sample_rate: int

    @property
    def longest_audio_s(self) -> float:
        """Seconds of the longest audio the GPT can say: ``max_audio_tokens`` codes of ``code_stride`` samples."""
        return self.max_audio_tokens * self.code_stride / self.sample_rate


def read_manifest(csv_path: Path) -> list[dict[str, str]]:
    """Rows of a coqui ``audio_file|text|speaker_name`` CSV; a missing file or header is a DataError."""
    if not csv_path.is_file():
        raise DataError(
            f"{csv_path}: not found; run the prepare stage (it writes metadata_train.csv / metadata_eval.csv)"
        )
    with csv_path.open(encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f, delimiter="|")
        missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise DataError(f"{csv_path}: header lacks {', '.join(missing)}; expected 'audio_file|text|speaker_name'")
        return list(reader)


def _read_audio_checked(path: Path) -> tuple[Optional[npt.NDArray[np.float32]], int, str]:
    """(mono samples or None, sample rate, sha256 of the file) - None when the file cannot be decoded."""
    try:
        data = path.read_bytes()
    except OSError:
        return None, 0, ""
    digest = hashlib.sha256(data).hexdigest()
    try:
        wav, sr = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
    except (sf.LibsndfileError, RuntimeError, ValueError):
        return None, 0, digest
    return wav.mean(axis=1), int(sr), digest


def load_clips(
    csv_path: Path, tokenizer: AmharicTokenizer, language: str, limits: Limits, *, progress: bool = True
) -> tuple[list[Clip], DataReport]:
    """Tokenise and check every row of ``csv_path``; return the usable clips and the per-reason report.

    A row's own ``language`` column (a run mixing datasets of several languages) picks the language it is
    encoded in: its own language token and, for a language XTTS-v2 knows, coqui's text cleaners for it;
    rows without one use ``language``.
    """
    rows = read_manifest(csv_path)
    root = csv_path.parent
    report = DataReport(csv=str(csv_path), total=len(rows))
    clips: list[Clip] = []
    for row in tqdm(rows, desc=f"checking {csv_path.name}", disable=None if progress else True, leave=False):
        raise_if_stopped("the clip checks")  # reading every clip's header takes minutes on a large dataset
        rel = (row.get("audio_file") or "").strip()
        text = (row.get("text") or "").strip()
        path = (root / rel) if rel else root
        name = rel or "<empty audio_file>"
        if not text:
            report.reject("empty_text", name)
            continue
        lang = (row.get("language") or "").strip() or language
        tokens = tokenizer.encode(text, lang)
        if len(tokens) > limits.max_text_tokens:
            report.reject("text_too_long", name)
            continue
        if UNK_ID in tokens:
            report.reject("unknown_token", name)
            continue
        if STOP_ID in tokens:
            report.reject("stop_token", name)
            continue
        wav, sr, digest = _read_audio_checked(path) if rel else (None, 0, "")
        if wav is None:
            report.reject("unreadable_audio", name)
            continue
        if sr != limits.sample_rate:
            report.reject("wrong_sample_rate", f"{name} ({sr} Hz)")
            continue
        n = int(wav.shape[0])
        if n < MIN_CLIP_S * sr:
            report.reject("audio_too_short", name)
            continue
        if math.ceil(n / limits.code_stride) + 3 > limits.max_audio_tokens:
            report.reject("audio_too_long", name)
            continue
        clips.append(Clip(path, text, (row.get("speaker_name") or "").strip(), tuple(tokens), n, digest, lang))
        report.languages[lang] = report.languages.get(lang, 0) + 1
        report.kept += 1
        report.kept_seconds += n / sr
    return clips, report


def crop_bounds(num_samples: int, min_len: int, max_len: int, rng: Optional[np.random.Generator]) -> tuple[int, int]:
    """coqui's ``get_prompt_slice``: a random length in [min_len, max_len] at a random start; with no
    ``rng`` (evaluation) the mid length from the start. A clip shorter than the length gives half of it."""
    length = rng.integers(min_len, max_len, endpoint=True) if rng is not None else (min_len + max_len) // 2
    if num_samples < length:
        length = num_samples // 2
    start = int(rng.integers(0, num_samples - length, endpoint=True)) if rng is not None else 0
    return start, start + int(length)


def read_segment(path: Path, start: int, stop: Optional[int]) -> npt.NDArray[np.float32]:
    try:
        wav, _ = sf.read(str(path), start=start, stop=stop, dtype="float32", always_2d=True)
    except (sf.LibsndfileError, RuntimeError, ValueError, OSError) as exc:
        raise DataError(
            f"{path}: cannot be read any more ({exc}); it passed the check at start - was it changed?"
        ) from None
    mono: npt.NDArray[np.float32] = wav.mean(axis=1)
    return mono


class ClipDataset(torch.utils.data.Dataset):
    """Items for training (random prompt crop per :class:`ItemKey`) or evaluation (fixed crop).

    With ``code_paths`` (the DVAE code cache) the item carries the cached codes and only the prompt
    crop is read from disk; without it the whole clip is loaded and codes are computed per step.
    """

    def __init__(
        self,
        clips: Sequence[Clip],
        *,
        sample_rate: int,
        cond_min_s: float,
        cond_max_s: float,
        seed: int,
        train: bool,
        code_paths: Optional[Sequence[Path]] = None,
    ):
        self.clips = list(clips)
        self.cond_min = int(round(cond_min_s * sample_rate))
        self.cond_max = int(round(cond_max_s * sample_rate))
        self.seed = int(seed)
        self.train = train
        self.code_paths = list(code_paths) if code_paths is not None else None

    def __len__(self) -> int:
        return len(self.clips)

    def _rng(self, key: ItemKey) -> Optional[np.random.Generator]:
        if not self.train:
            return None
        return np.random.default_rng([self.seed, key.epoch, key.rank, key.batch_index, key.slot, key.clip])

    def __getitem__(self, key: ItemKey) -> ClipItem:
        clip = self.clips[key.clip]
        start, end = crop_bounds(clip.num_samples, self.cond_min, self.cond_max, self._rng(key))
        codes: Optional[torch.Tensor] = None
        if self.code_paths is not None:
            codes = torch.from_numpy(np.load(self.code_paths[key.clip], allow_pickle=False).astype(np.int64))
            crop = read_segment(clip.audio_path, start, end)
        else:
            wav = read_segment(clip.audio_path, 0, None)
            crop = wav[start:end]
        cond = torch.zeros(1, 1, self.cond_max)
        cond[0, 0, : crop.shape[0]] = torch.from_numpy(crop)
        item: ClipItem = {"clip": key.clip, "position": (key.epoch, key.batch_index), "wav_length": clip.num_samples,
                          "text": torch.tensor(clip.tokens, dtype=torch.int32), "cond_idxs": torch.tensor([start, end]),
                          "conditioning": cond}
        if codes is not None:
            item["codes"] = codes
        else:
            item["wav"] = torch.from_numpy(wav).unsqueeze(0)
        return item


def collate(items: Sequence[ClipItem]) -> Batch:
    """Pad like coqui: int32 text (B, T_text), float wav (B, 1, T), conditioning (B, 1, 1, T_cond)."""
    b = len(items)
    text_lengths = torch.tensor([it["text"].shape[0] for it in items], dtype=torch.long)
    text = torch.zeros(b, int(text_lengths.max()), dtype=torch.int32)
    for i, it in enumerate(items):
        text[i, : it["text"].shape[0]] = it["text"]
    batch: Batch = {
        "padded_text": text,
        "text_lengths": text_lengths,
        "wav_lengths": torch.tensor([it["wav_length"] for it in items], dtype=torch.long),
        "conditioning": torch.stack([it["conditioning"] for it in items]),
        "cond_idxs": torch.stack([it["cond_idxs"] for it in items]),
        "clips": torch.tensor([it["clip"] for it in items], dtype=torch.long),
        "position": items[0]["position"],
    }
    if "wav" in items[0]:
        wav = torch.zeros(b, 1, int(batch["wav_lengths"].max()))
        for i, it in enumerate(items):
            wav[i, :, : it["wav"].shape[-1]] = it["wav"]
        batch["wav"] = wav
    if "codes" in items[0]:
        codes = torch.zeros(b, max(it["codes"].shape[0] for it in items), dtype=torch.long)
        for i, it in enumerate(items):
            codes[i, : it["codes"].shape[0]] = it["codes"]
        batch["codes"] = codes
    return batch


def _seed_worker(base_seed: int, worker_id: int) -> None:
    """Per-worker seeds derived from (seed, start step, worker id); items do not depend on them."""
    ignore_stop_signals()
    seed = (base_seed * 1_000_003 + worker_id) % (2**32)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def make_loader(
    dataset: ClipDataset, batch_sampler: ResumableBatchSampler, *, num_workers: int, base_seed: int, pin_memory: bool
) -> torch.utils.data.DataLoader:
    """A DataLoader over ``batch_sampler``; its own generator keeps the global torch RNG untouched."""
    return torch.utils.data.DataLoader(
        dataset,
        batch_sampler=batch_sampler,
        num_workers=num_workers,
        collate_fn=collate,
        pin_memory=pin_memory,
        worker_init_fn=functools.partial(_seed_worker, base_seed) if num_workers else None,
        generator=torch.Generator().manual_seed(base_seed),
        prefetch_factor=4 if num_workers else None,
    )


def eval_batches(clips: Sequence[Clip], batch_size: int, max_batches: int) -> list[list[ItemKey]]:
    """Fixed evaluation batches: clips in CSV order, at most ``max_batches`` of them."""
    keys = [ItemKey(i, 0, i // batch_size, i % batch_size, 0) for i in range(min(len(clips), batch_size * max_batches))]
    return [keys[s : s + batch_size] for s in range(0, len(keys), batch_size)]

