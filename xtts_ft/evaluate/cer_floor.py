"""The CER floor: the recogniser's own CER on the eval set's real recordings.

A synthesised sample cannot be heard better than the real voice it imitates: a recogniser that
misreads 9 % of the characters of the real recordings will misread at least about that much of
a perfect sample. The floor puts each checkpoint's sample CER in proportion ("CER 0.12 against a
floor of 0.09"). It is the mean per-clip CER, like ``sample_cer``, over the first
``evaluation.cer_floor_clips`` eval clips, measured once per run at the first evaluation and kept
in ``samples/cer_floor.json`` with a key of the recogniser and the clips: a resumed run reads it
back, a changed recogniser or eval set measures it again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

from xtts_ft.json_types import JsonObject
from xtts_ft.layout import RunLayout
from xtts_ft.tempfiles import atomic_write
from xtts_ft.text.error_rates import error_rates

if TYPE_CHECKING:  # (intelligibility imports torch: a report is written without it)
    from xtts_ft.evaluate.intelligibility import Transcriber

log = logging.getLogger(__name__)


def floor_key(recognizer_name: str, clips: Sequence[tuple[Path, str]]) -> str:
    """What the floor depends on: the recogniser, and each clip's path, size and text."""
    h = hashlib.sha1(recognizer_name.encode("utf-8"))
    for wav, text in clips:
        size = Path(wav).stat().st_size if Path(wav).is_file() else -1
        h.update(f"\0{Path(wav).resolve()}\0{size}\0{text}".encode())
    return h.hexdigest()


def write_measurement(path: Path, record: JsonObject) -> None:
    """A once-per-run measurement of the real eval recordings (this floor, their predicted quality), atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(record, ensure_ascii=False, indent=1) + "\n")


def read_cer_floor(run_dir: Path) -> Optional[JsonObject]:
    """The stored floor record ({cer_floor, clips, recognizer, key, per_clip}), or None when there is none."""
    path = RunLayout(run_dir).cer_floor
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict):
        return None
    value = record.get("cer_floor")
    return record if isinstance(value, (int, float)) and math.isfinite(value) else None


def measure_cer_floor(run_dir: Path, recognizer: Optional[Transcriber], recognizer_name: str, clips: Sequence[tuple[Path, str]],
                      max_clips: int) -> Optional[float]:
    """The floor for this run: read back when stored for the same recogniser and clips, else measured and stored.

    ``clips``: the eval set's (wav, text) pairs; the first ``max_clips`` are used. None: no recogniser,
    no clips, or ``max_clips`` 0.
    """
    clips = [(Path(w), str(t)) for w, t in clips][:max_clips]
    if recognizer is None or not clips:
        return None
    key = floor_key(recognizer_name, clips)
    stored = read_cer_floor(run_dir)
    if stored is not None and stored.get("key") == key:
        return float(stored["cer_floor"])
    heard = recognizer.transcribe_files([w for w, _ in clips])
    cers = [round(error_rates(t, h).cer, 4) for (_, t), h in zip(clips, heard)]
    per_clip: list[JsonObject] = [{"wav": w.name, "text": t, "heard": h, "cer": cer}
                                  for (w, t), h, cer in zip(clips, heard, cers)]
    floor = sum(cers) / len(per_clip)
    write_measurement(RunLayout(run_dir).cer_floor, {"cer_floor": round(floor, 4), "clips": len(per_clip),
                                                     "recognizer": recognizer_name, "key": key, "per_clip": per_clip})
    log.info("evaluation: the recogniser's CER on %d real eval recordings (the floor of sample CER): %.3f",
             len(per_clip), floor)
    return round(floor, 4)
