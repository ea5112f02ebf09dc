"""Does each clip say its transcript? ``dataset.transcript_check``.

Every clip that passed the other checks is transcribed by the speech recogniser (``asr.model``)
from its prepared WAV, and its character error rate against the normalised transcript is
measured with :func:`xtts_ft.text.error_rates.error_rates` (homophones folded, numbers read out,
punctuation dropped). A clip above the threshold is rejected as ``transcript_mismatch`` with the
recognised text in ``rejected.tsv``; the CER of every checked clip goes into the data report.
Scraped Amharic data often pairs audio with the wrong line, and XTTS trained on such pairs learns
to babble.

Recognised text is cached per clip in ``<out_dir>/transcript_check.json``, keyed by the clip's
audio cache key and the recogniser's identity, so a re-run transcribes only new or changed
clips (or everything, after the recogniser changes).
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, Sequence

from xtts_ft.stop_signals import raise_if_stopped
from xtts_ft.tempfiles import atomic_write
from xtts_ft.text.error_rates import error_rates

log = logging.getLogger(__name__)

CACHE_FILE = "transcript_check.json"


class FileTranscriber(Protocol):
    """What the check needs of a speech recogniser (``xtts_ft.asr.Recognizer``, a layer above this one)."""

    folder: Path  # the model folder

    def transcribe_files(self, paths: Sequence[str | Path], refuse_short: bool = False) -> list[str]: ...


def recognizer_identity(recognizer: FileTranscriber) -> str:
    """What the cache is keyed on: the model folder (a hub snapshot path names its commit) and its weights."""
    folder = Path(recognizer.folder).resolve()
    parts = [str(folder)]
    for name in ("model.safetensors", "pytorch_model.bin", "config.json", "vocab.json"):
        p = folder / name
        if p.is_file():
            st = p.stat()
            parts.append(f"{name}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


@dataclass
class TranscriptCheck:
    """Outcome for the checked clips: clip id -> (CER, recognised text), and how many were transcribed now."""

    results: dict[str, tuple[float, str]] = field(default_factory=dict)
    transcribed: int = 0
    reused: int = 0

    def mismatches(self, threshold: float) -> dict[str, tuple[float, str]]:
        return {c: r for c, r in self.results.items() if r[0] > threshold}


def check_transcripts(
    clips: list[tuple[str, str, Path, str]], recognizer: FileTranscriber, out_dir: Path, batch: int = 64
) -> TranscriptCheck:
    """``clips``: (clip id, normalised transcript, prepared wav, audio cache key) of every clip to check."""
    cache_path = Path(out_dir) / CACHE_FILE
    try:
        cache = json.loads(cache_path.read_text(encoding="utf-8")) if cache_path.is_file() else {}
    except (json.JSONDecodeError, UnicodeDecodeError):
        cache = {}  # a damaged cache only costs a re-transcription
    model_id = recognizer_identity(recognizer)
    out = TranscriptCheck()
    todo = []
    for clip_id, text, wav, key in clips:
        entry = cache.get(clip_id)
        if isinstance(entry, dict) and entry.get("key") == key and entry.get("model") == model_id:
            heard = str(entry.get("heard", ""))
            out.results[clip_id] = (error_rates(text, heard).cer, heard)
            out.reused += 1
        else:
            todo.append((clip_id, text, wav, key))
    for start in range(0, len(todo), batch):  # saved after each batch: an interrupted run keeps its work
        chunk = todo[start : start + batch]
        for (clip_id, text, _, key), heard in zip(chunk, recognizer.transcribe_files([c[2] for c in chunk])):
            out.results[clip_id] = (error_rates(text, heard).cer, heard)
            cache[clip_id] = {"key": key, "model": model_id, "heard": heard}
            out.transcribed += 1
        atomic_write(cache_path, json.dumps(cache, ensure_ascii=False))
        log.info("transcript check: %d/%d clips transcribed", min(start + batch, len(todo)), len(todo))
        raise_if_stopped("prepare (the transcript check)")  # after the save: the next run reuses this batch
    return out
