"""Which checkpoint is "best": the one place that turns an evaluation into one number (lower is better).

``checkpoint.best_metric``:

* ``eval_loss``: the teacher-forced loss on the eval clips (needs no recogniser; says little about
  whether samples are intelligible once the loss is low);
* ``cer``: ``sample_cer``, the mean character error rate of the evaluation samples as the speech
  recogniser hears them (does it say the text?);
* ``cer_similarity``: ``sample_cer + 0.5 * (1 - sample_speaker_similarity)``: intelligibility first,
  voice second; a checkpoint must gain 5 points of CER to make up for losing 0.1 of similarity.

A step whose evaluation lacks the metric (e.g. ``cer`` with ``evaluation.recognize`` off) scores
None and is never "best"; config validation refuses that combination up front.
"""

from __future__ import annotations

import math
from typing import Optional

BEST_METRICS = ("eval_loss", "cer", "cer_similarity")
SIMILARITY_WEIGHT = 0.5


def best_score(metric: str, metrics: Optional[dict]) -> Optional[float]:
    """The score of one evaluation under ``metric`` (lower is better); None when it cannot be computed."""
    if not metrics:
        return None
    if metric == "eval_loss":
        value = metrics.get("eval_loss")
    elif metric == "cer":
        value = metrics.get("sample_cer")
    elif metric == "cer_similarity":
        cer, sim = metrics.get("sample_cer"), metrics.get("sample_speaker_similarity")
        value = None if cer is None or sim is None else float(cer) + SIMILARITY_WEIGHT * (1.0 - float(sim))
    else:
        raise ValueError(f"unknown best metric {metric!r}; expected one of {BEST_METRICS}")
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)
