"""Subtitle files (SRT, WebVTT) and the offset between their cues and the speech.

:func:`read_cues` parses ``.srt`` and ``.vtt`` (cue timings ``HH:MM:SS,mmm`` or ``.mmm``, optional
hours in VTT; tags such as ``<i>`` and VTT cue settings dropped). :func:`fit_offset` compares each
cue with where forced alignment found its text: offset = aligned time - cue time (the mean of the
start and end differences), fitted as ``offset(t) = a + b * t`` by least squares, refitted once
without the cues more than ``OUTLIER_S`` off the line. ``b`` is the drift (cues running
slow or fast against the audio, e.g. a 25 vs 23.976 fps conversion); with fewer than
``MIN_CUES_FOR_DRIFT`` well-aligned cues only a constant offset (the median) is estimated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import numpy.typing as npt

from xtts_ft.ingest.source_audio import IngestError

_TIME = r"(?:(\d+):)?(\d{1,2}):(\d{2})[,.](\d{1,3})"
_TIMING_RE = re.compile(rf"^\s*{_TIME}\s*-->\s*{_TIME}(?=\s|$)")  # `,1000` ms is no timing: not read as 100
_TAG_RE = re.compile(r"<[^>]*>|\{\\[^}]*\}")
OUTLIER_S = 0.5
MIN_CUES_FOR_DRIFT = 4


@dataclass(frozen=True)
class Cue:
    start: float
    end: float
    text: str
    line: int  # line of its timing in the file


def _seconds(h: Optional[str], m: str, s: str, ms: str) -> float:
    return int(h or 0) * 3600 + int(m) * 60 + int(s) + int(ms.ljust(3, "0")) / 1000


@dataclass(frozen=True)
class UnreadCue:
    """A cue whose timing line cannot be read (``00:00:11;661``, ``,1000`` ms): reported, never silently lost."""

    line: int
    timing: str
    text: str


def _cue_text(lines: list[str], k: int) -> tuple[str, int]:
    """The text of the cue whose lines start at ``k`` (tags dropped), and the index after its last line."""
    text_lines = []
    while k < len(lines) and lines[k].strip():
        text_lines.append(_TAG_RE.sub("", lines[k]).strip())
        k += 1
    return " ".join(t for t in text_lines if t), k


def read_cues(path: Path, unread: Optional[list[UnreadCue]] = None) -> list[Cue]:
    """The cues of an .srt or .vtt file in time order; IngestError for an unknown format or no cues.

    A cue whose timing line has ``-->`` but cannot be read is appended to ``unread`` (line number,
    timing line, text) and left out.
    """
    if path.suffix.lower() not in (".srt", ".vtt"):
        raise IngestError(f"{path}: unknown subtitle format '{path.suffix or '(none)'}'; use an .srt or .vtt file")
    if not path.is_file():
        raise IngestError(f"{path}: subtitle file not found; check the path")
    try:
        lines = path.read_bytes().decode("utf-8-sig").replace("\r\n", "\n").replace("\r", "\n").split("\n")
    except UnicodeDecodeError:
        raise IngestError(f"{path}: not UTF-8 text; save the subtitles as UTF-8") from None
    cues: list[Cue] = []
    k = 0
    while k < len(lines):
        m = _TIMING_RE.match(lines[k])
        if not m:
            if "-->" in lines[k]:
                text, after = _cue_text(lines, k + 1)
                if unread is not None:
                    unread.append(UnreadCue(k + 1, lines[k].strip(), text))
                k = after
                continue
            k += 1
            continue
        g = m.groups()
        start, end, at = _seconds(*g[:4]), _seconds(*g[4:]), k + 1
        text, k = _cue_text(lines, k + 1)
        if end <= start:
            raise IngestError(f"{path}:{at}: cue ends ({end:.3f} s) before it starts ({start:.3f} s); fix its timing")
        cues.append(Cue(start, end, text, at))
    if not cues:
        raise IngestError(f"{path}: no subtitle cues found (expected 'HH:MM:SS,mmm --> HH:MM:SS,mmm' lines)")
    return sorted(cues, key=lambda c: c.start)


@dataclass
class OffsetFit:
    offset_s: float  # offset at t = 0: add it to the cue times
    drift_s_per_hour: float
    cues_used: int
    residual_s: float  # median distance of the used cues from the fitted line

    def at(self, t: float) -> float:
        return self.offset_s + self.drift_s_per_hour * t / 3600.0


def fit_offset(cue_times: list[tuple[float, float]], aligned_times: list[tuple[float, float]]) -> Optional[OffsetFit]:
    """Offset (and drift) of the speech against the cues, from cues whose text was aligned; None if none was."""
    if not cue_times:
        return None
    t = np.array([(a + b) / 2 for a, b in cue_times])
    d = np.array([((sa - ca) + (se - ce)) / 2 for (ca, ce), (sa, se) in zip(cue_times, aligned_times)])
    use: npt.NDArray[np.bool_] = np.ones(len(d), bool)
    if len(d) < MIN_CUES_FOR_DRIFT or np.ptp(t) <= 0:
        off = float(np.median(d))
        return OffsetFit(off, 0.0, len(d), float(np.median(np.abs(d - off))))
    for _ in range(2):
        slope, intercept = np.polyfit(t[use], d[use], 1)
        residual = np.abs(d - (intercept + slope * t))
        use = residual <= OUTLIER_S
        if use.sum() < MIN_CUES_FOR_DRIFT:
            use = np.ones(len(d), bool)
            break
    slope, intercept = np.polyfit(t[use], d[use], 1)
    residual = np.abs(d[use] - (intercept + slope * t[use]))
    return OffsetFit(float(intercept), float(slope * 3600.0), int(use.sum()), float(np.median(residual)))
