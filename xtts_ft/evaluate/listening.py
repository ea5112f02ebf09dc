"""Every evaluation listens to its samples: how they sound against the user's own recordings, and whether they
stop after their text.

The listening itself is done above this package (:class:`xtts_ft.assess.listener.Listener`: DNSMOS, silero-vad,
the recogniser's word alignment); the caller hands it in as a :class:`SampleListener`. Here:

- :func:`listen_to_samples` fills each sample's ``quality_mos``, ``snr_db`` and ``tail_s``;
- :func:`reference_quality` is DNSMOS's mean score of the first ``evaluation.quality_clips`` real eval clips,
  the recordings the model learns from, scored the same way: measured once per run and kept in
  ``samples/reference_quality.json`` with a key of the predictor and the clips (like the CER floor);
- :func:`quality_metrics`: ``sample_quality_mos``, ``reference_quality_mos``, their difference
  ``quality_mos_difference`` (samples minus recordings: below 0, the samples sound worse than the recordings),
  and ``sample_tail_rate``, the share of samples with more than ``evaluation.max_tail_s`` of speech after
  their text's last word, also per length bucket (``sample_tail_rate_short`` first: short texts are where
  XTTS fine-tunes babble on).

DNSMOS was trained on English listeners' ratings of English speech: its number for Amharic, or for
synthetic speech, is not a verdict; the difference against the user's own recordings is what it can tell.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Protocol, Sequence

from xtts_ft.evaluate.cer_floor import floor_key, write_measurement
from xtts_ft.evaluate.intelligibility import LENGTH_BUCKETS, finite_mean, length_bucket
from xtts_ft.json_types import JsonObject
from xtts_ft.layout import RunLayout
from xtts_ft.quality.predictor import PREDICTOR_NAME
from xtts_ft.stop_signals import raise_if_stopped

if TYPE_CHECKING:
    from xtts_ft.evaluate.synthesis import SampleResult

log = logging.getLogger(__name__)

# What the listening figures mean and cannot say, in one sentence each: the report, the model card and the web app's
# Listen tab show them beside the numbers.
QUALITY_NOTE = ("Predicted quality is DNSMOS's 1-5 score, trained on English listeners' ratings: it hears noise, "
                "rooms and distortion, not Amharic, so read the samples' score against the real recordings' (the "
                "difference), never alone.")
TAIL_NOTE = ("Tail rate is the share of samples with more than evaluation.max_tail_s of speech after their text's "
             "last word (the text aligned to the audio by the recogniser): a model that keeps talking.")
LISTENING_NOTE = f"{QUALITY_NOTE} {TAIL_NOTE}"


class ClipScores(Protocol):
    """What a listener found in one clip; read only (assess's Heard is a frozen dataclass)."""

    @property
    def mos(self) -> Optional[float]: ...

    @property
    def snr_db(self) -> Optional[float]: ...

    @property
    def tail_s(self) -> Optional[float]: ...


class SampleListener(Protocol):
    def listen_file(self, path: Path, text: Optional[str] = None) -> ClipScores: ...


def listen_to_samples(samples: Sequence[SampleResult], listener: SampleListener) -> None:
    """Fill ``quality_mos``, ``snr_db`` and ``tail_s`` of each sample (tail_s: when the listener has a recogniser)."""
    for s in samples:
        raise_if_stopped("listening to the samples")
        heard = listener.listen_file(Path(s.path), s.text)
        s.quality_mos, s.snr_db, s.tail_s = heard.mos, heard.snr_db, heard.tail_s


def read_reference_quality(run_dir: Path) -> Optional[JsonObject]:
    """The stored record ({reference_quality_mos, clips, predictor, key, per_clip}), or None."""
    try:
        record = json.loads(RunLayout(run_dir).reference_quality.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict):
        return None
    value = record.get("reference_quality_mos")
    return record if isinstance(value, (int, float)) and math.isfinite(value) else None


def reference_quality(run_dir: Path, listener: SampleListener, clips: Sequence[tuple[Path, str]],
                      max_clips: int) -> Optional[float]:
    """The recordings' mean predicted quality: read back when stored for the same predictor and clips, else
    measured and stored. None: no clips, or ``max_clips`` 0."""
    clips = [(Path(w), str(t)) for w, t in clips][:max_clips]
    if not clips:
        return None
    key = floor_key(PREDICTOR_NAME, clips)
    stored = read_reference_quality(run_dir)
    if stored is not None and stored.get("key") == key:
        return float(stored["reference_quality_mos"])
    per_clip: list[JsonObject] = []
    scores: list[float] = []
    for wav, _ in clips:
        raise_if_stopped("scoring the real eval clips")
        heard = listener.listen_file(wav)
        if heard.mos is None:  # DNSMOS scores every clip the listener could read: not expected, but not averaged
            raise ValueError(f"evaluation: no predicted quality for the real eval clip '{wav}'")
        scores.append(heard.mos)
        per_clip.append({"wav": wav.name, "mos": heard.mos, "snr_db": heard.snr_db})
    value = round(sum(scores) / len(per_clip), 3)
    write_measurement(RunLayout(run_dir).reference_quality, {"reference_quality_mos": value, "clips": len(per_clip),
                                                             "predictor": PREDICTOR_NAME, "key": key,
                                                             "per_clip": per_clip})
    log.info("evaluation: predicted quality of %d real eval recordings (what samples are compared with): %.2f",
             len(per_clip), value)
    return value


def quality_metrics(samples: Sequence[SampleResult], reference: Optional[float], max_tail_s: float) -> dict[str, float]:
    """The evaluation's listening keys (absent: nothing measured)."""
    out: dict[str, Optional[float]] = {
        "sample_quality_mos": finite_mean([s.quality_mos for s in samples]),
        "reference_quality_mos": reference,
    }
    if out["sample_quality_mos"] is not None and reference is not None:
        out["quality_mos_difference"] = out["sample_quality_mos"] - reference
    out["sample_tail_rate"] = _tail_rate(samples, max_tail_s)
    for name in LENGTH_BUCKETS:
        out[f"sample_tail_rate_{name}"] = _tail_rate(
            [s for s in samples if length_bucket(s.normalized_text) == name], max_tail_s)
    return {k: v for k, v in out.items() if v is not None}


def _tail_rate(samples: Sequence[SampleResult], max_tail_s: float) -> Optional[float]:
    return finite_mean([float(s.tail_s > max_tail_s) for s in samples if s.tail_s is not None])
