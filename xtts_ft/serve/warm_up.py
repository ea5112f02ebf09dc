"""Before the first caller: the engine speaks a sentence to 1, 2, 4, ... ``max_active_streams`` callers at once.

A server's first requests pay costs that later ones do not: on CUDA each batch size's decode step is recorded
as a CUDA graph the first time a step needs it (:mod:`xtts_ft.inference.decode_graph`: on an H200 a caller
alone heard audio after 0.39 s while the graphs were being recorded, 0.22 s afterwards), and so is each
prefill bucket (:mod:`xtts_ft.inference.prefill_graph`), cuDNN chooses its HiFiGAN kernels for each window
length and batch, and the voice's conditioning latents are computed. The warm-up pays them before ``serve``
prints its address: one round per batch size, its callers starting together and synthesising the same short
sentence, so the decode loop meets the row counts up to its limit (threads cannot promise it: a caller that is
late by a whole piece decodes alone, and its shape waits for a caller); then, in the decode loop's thread, the
prefill of one request for every length a piece can have.

``ServeConfig.warm_up``: ``auto`` (the default) warms up on CUDA only. On a CPU the same rounds would take
seconds to minutes (HiFiGAN alone is about 0.13 s per chunk there) and there are no graphs to record;
``on`` runs them anyway. The warm-up's audio is not counted in the engine's statistics.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from xtts_ft.config import DEFAULT_TEST_SENTENCES
from xtts_ft.errors import UserError

if TYPE_CHECKING:
    from xtts_ft.serve.engine import SpeechEngine

log = logging.getLogger(__name__)

# One sentence, longer than ServeConfig.short_text_chars so that it streams as callers' texts do. The run's
# language when the project has a sentence of it, else English (XTTS's tokenizer reads Latin letters anyway).
SENTENCES = {"am": DEFAULT_TEST_SENTENCES[1]}
OTHER_LANGUAGES = "The weather is very pleasant today, and the market is busy."


def wanted(setting: str, device_type: str) -> bool:
    """Whether ``ServeConfig.warm_up`` = ``setting`` warms up an engine on a device of ``device_type`` (cpu, cuda)."""
    return setting == "on" or (setting == "auto" and device_type == "cuda")


def callers_per_round(max_active: int) -> list[int]:
    """1, 2, 4, ... up to ``max_active`` (which ends the list): every power-of-two batch the decode cache rounds to."""
    rounds = [1]
    while rounds[-1] * 2 < max_active:
        rounds.append(rounds[-1] * 2)
    return rounds + ([max_active] if max_active > 1 else [])


@dataclass(frozen=True)
class WarmUpReport:
    rounds: tuple[int, ...]  # callers in each round
    seconds: float
    recordings: int  # CUDA graphs (decode steps, prefills) recorded during the warm-up
    skipped: Optional[str] = None  # why it did not run (no voice yet, the text refused)

    def describe(self) -> str:
        if self.skipped:
            return f"warm-up skipped: {self.skipped}"
        return (f"warm-up: {len(self.rounds)} rounds of {', '.join(map(str, self.rounds))} callers in "
                f"{self.seconds:.1f} s; {self.recordings} CUDA graph(s) recorded")


def warm_up(engine: SpeechEngine) -> WarmUpReport:
    """Run the rounds on ``engine`` (a :class:`.engine.SpeechEngine`) with its first voice; then forget their stats."""
    voices = engine.voices.names()
    if not voices:
        return WarmUpReport((), 0.0, 0, "no voice yet (the first request pays the one-time costs)")
    text = SENTENCES.get(engine.language, OTHER_LANGUAGES)
    rounds = tuple(callers_per_round(engine.loop.max_active))
    recorded = engine.loop.graph_recordings
    start = time.perf_counter()
    for callers in rounds:
        refused = _round(engine, text, voices[0], callers)
        if refused is not None:
            return WarmUpReport(rounds, time.perf_counter() - start, 0, f"the warm-up text was refused: {refused}")
    # a caller alone with a text of another length must not wait for its prefill's recording either: every length
    # a piece can have ([conditioning][start, text, stop][start code]; a piece has fewer tokens than the limit)
    longest = int(engine._latents(engine.voices.get(voices[0]))[0].shape[1]) + engine.max_text_tokens + 3
    engine.loop.call(lambda decoder: decoder.record_prefills(longest))
    engine.forget_stats()
    recordings = engine.loop.graph_recordings - recorded
    return WarmUpReport(rounds, time.perf_counter() - start, recordings)


def _round(engine: SpeechEngine, text: str, voice: str, callers: int) -> Optional[str]:
    """``callers`` threads synthesising ``text`` at once; a user error's message (e.g. a language the tokenizer
    lacks) or None. Any other failure is raised: a model that cannot speak should stop the server here."""
    problems: list[BaseException] = []
    together = threading.Barrier(callers)  # they start at once, so the loop (nearly always) decodes them together

    def caller() -> None:
        try:
            together.wait(60)
            for _ in engine.synthesize(text, voice):
                pass
        except Exception as exc:  # noqa: BLE001 - handed to the warm-up's thread below
            problems.append(exc)

    threads = [threading.Thread(target=caller, name=f"xtts-ft-warm-up-{i}") for i in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if not problems:
        return None
    if isinstance(problems[0], UserError):
        return str(problems[0]).splitlines()[0]
    raise problems[0]
