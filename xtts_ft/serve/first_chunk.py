"""Where a piece's first audio spends its time: one record per streamed piece, kept for the last few hundred.

Issue 33's goal for a caller alone is first audio within 100 ms. On an H200 the engine took 190 ms, of which
the GPU work (a prefill, 10 decode steps from CUDA graphs, one short HiFiGAN window) is about 70 ms, so the
rest is somewhere between the threads. Each streamed piece therefore records the moments its first chunk
passed, measured where they happen (the decode thread stamps every code it hands a reader, the reader
stamps the rest), and :class:`SpeechEngine.stats` keeps them; ``benchmarks/engine_load.py`` prints their
medians beside first audio.

The parts add up to the piece's time to first audio (submission to the chunk handed to the caller), plus
``prepare`` for a text's first piece:

- ``prepare``: the text's start to the first piece's submission (split, tokenizer, prefix embeddings);
- ``to_first_code``: submission to the first code (waiting for the decode thread's current step, the prefill);
- ``decoding``: the first code to the last code of the first chunk (``stream_first_chunk_codes - 1`` steps,
  shared with the rest of the batch);
- ``handoff``: that code's stamp to the reader having it (a thread waking, and the GIL);
- ``vocoding``: the window planned, the vocoder's turn waited for and HiFiGAN run (with other callers'
  chunks, on CUDA);
- ``finish``: the crossfade and the audio handed back as a NumPy array.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass
from typing import Optional

KEPT = 256  # the most recent records kept (a benchmark's round; /health does not need more)
PARTS = ("prepare", "to_first_code", "decoding", "handoff", "vocoding", "finish")  # in the order they happen


@dataclass(frozen=True)
class FirstChunkTimes:
    """Seconds spent in each part of one piece's way to its first audio (see the module's list); ``opens_text``:
    the piece is its text's first, whose first audio is the caller's."""

    prepare: float
    to_first_code: float
    decoding: float
    handoff: float
    vocoding: float
    finish: float
    opens_text: bool

    @property
    def total(self) -> float:
        return sum(float(getattr(self, name)) for name in PARTS)

    @classmethod
    def from_moments(cls, *, began: Optional[float], submitted: float, code_times: list[float], first_codes: int,
                     read: float, vocoded: float, handed: float) -> FirstChunkTimes:
        """From the moments: the text's start (None: not a text's first piece), the submission, the decode thread's
        stamp of each code, how many codes the first chunk waited for, the reader having them, the vocoder's audio
        back, the chunk handed on."""
        first_code = code_times[0] if code_times else read
        chunk_codes = code_times[min(first_codes, len(code_times)) - 1] if code_times else read
        return cls(prepare=0.0 if began is None else submitted - began, to_first_code=first_code - submitted,
                   decoding=chunk_codes - first_code, handoff=read - chunk_codes, vocoding=vocoded - read,
                   finish=handed - vocoded, opens_text=began is not None)


class FirstChunkLog:
    """The last :data:`KEPT` records (appended by the readers' threads; a deque's append is atomic)."""

    def __init__(self) -> None:
        self.records: deque[FirstChunkTimes] = deque(maxlen=KEPT)

    def add(self, record: FirstChunkTimes) -> None:
        self.records.append(record)

    def clear(self) -> None:
        self.records.clear()

    def medians(self, opening: bool = True) -> dict[str, float]:
        """The median of each part and of the total, in seconds, over the texts' first pieces (``opening``: the
        callers' first audio) or over the pieces after them ({} when there is none)."""
        chosen = [r for r in list(self.records) if r.opens_text == opening]
        if not chosen:
            return {}
        out = {name: statistics.median(getattr(r, name) for r in chosen) for name in PARTS}
        out["total"] = statistics.median(r.total for r in chosen)
        return out


def describe(medians: dict[str, float]) -> str:
    """One line: each part's median in milliseconds, in order ('' when there is none)."""
    if not medians:
        return ""
    parts = ", ".join(f"{name.replace('_', ' ')} {1000 * seconds:.0f}" for name, seconds in medians.items()
                      if name != "total")
    return f"first chunk, median ms: {parts} (total {1000 * medians['total']:.0f})"
