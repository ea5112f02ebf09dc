"""CER per language: a run that replays base-language data (a dataset list with ``en`` rows) hears
whether the model still speaks it.

For each of the run's other languages that has eval clips, the first ``evaluation.language_clips``
of them are re-synthesised from their own text, in their own language (XTTS takes a language code
per request) and with their own recording as the voice, then transcribed by that language's
recogniser (``asr.per_language.<code>``) and scored against the text: ``sample_cer_<code>`` and
``sample_stop_rate_<code>``, next to the trainer's ``eval_loss_<code>``. Amharic is scored with the
project's normaliser; other languages with a plain lower-case, punctuation-free comparison
(:func:`xtts_ft.text.error_rates.plain_scoring_text`). The run's own language keeps its metric names
(``sample_cer`` and the rest, from the test sentences), so nothing existing changes.

A language without a recogniser (or with ``evaluation.recognize`` off) gets its eval loss only, and
the hook says once, when it is built, why it has no CER.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Optional, Sequence

import numpy as np

from xtts_ft.asr.recognizer import Recognizer
from xtts_ft.config import LANGUAGE_ALIASES, AsrConfig, Config
from xtts_ft.errors import UserError
from xtts_ft.evaluate.intelligibility import Transcriber
from xtts_ft.evaluate.references import pick_references
from xtts_ft.evaluate.synthesis import synthesize_requests
from xtts_ft.stop_signals import raise_if_stopped
from xtts_ft.text.error_rates import error_rates

if TYPE_CHECKING:
    from TTS.tts.models.xtts import Xtts

    from xtts_ft.evaluate.synthesis import SampleResult
    from xtts_ft.tokenizer import AmharicTokenizer

log = logging.getLogger(__name__)


@dataclass
class LanguageEval:
    """One other language of the run: its eval clips ``(wav, text)`` and its recogniser (None: eval loss only)."""

    language: str
    clips: list[tuple[Path, str]]
    recognizer: Optional[Transcriber] = None
    why_no_cer: str = ""  # said once when recognizer is None


def other_languages(cfg: Config) -> list[str]:
    """The languages of the run's datasets other than the run's own (``amh`` is ``am``), sorted."""
    def code(language: str) -> str:
        return LANGUAGE_ALIASES.get(language, language)

    return sorted({lang for lang in map(cfg.dataset_language, cfg.datasets) if code(lang) != code(cfg.run.language)})


def language_evals(cfg: Config, data_dir: Path,
                   load_recognizer: Optional[Callable[[AsrConfig], Transcriber]] = None) -> list[LanguageEval]:
    """What each other language of the run is evaluated with, from the prepared data in ``data_dir``.

    ``load_recognizer(asr_settings)`` builds a recogniser (default: :meth:`Recognizer.from_config`).
    """

    if load_recognizer is None:

        load_recognizer = Recognizer.from_config
    out: list[LanguageEval] = []
    for language in other_languages(cfg):
        clips = pick_references(cfg.evaluation, Path(data_dir), language).eval_clips[: cfg.evaluation.language_clips]
        if not clips:
            continue
        settings = cfg.recognizer_settings(language)
        if not cfg.evaluation.recognize:
            out.append(LanguageEval(language, clips, None, "evaluation.recognize is off"))
        elif settings is None:
            out.append(LanguageEval(language, clips, None, f"asr.per_language names no recogniser for '{language}'"))
        else:
            log.info("evaluation: '%s' samples are transcribed by %s", language, settings.model)
            try:
                recognizer = load_recognizer(settings)
            except UserError as exc:  # its messages name asr.model; this one is the language's entry
                raise type(exc)(str(exc).replace("asr.model", f"asr.per_language.{language}.model", 1)) from None
            out.append(LanguageEval(language, clips, recognizer))
    return out


def say_why_no_cer(languages: Sequence[LanguageEval]) -> None:
    """Once per run (the hook is built once): which languages get their eval loss only, and why."""
    for lang in languages:
        if lang.recognizer is None:
            log.info("evaluation: no sample_cer_%s (%s); its eval clips still give eval_loss_%s",
                     lang.language, lang.why_no_cer or "no recogniser", lang.language)


def _mean(values: Iterable[Optional[float]]) -> Optional[float]:
    finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    return float(np.mean(finite)) if finite else None


def evaluate_languages(xtts: Xtts, tokenizer: AmharicTokenizer, languages: Sequence[LanguageEval], out_dir: Path, *,
                       temperature: float, seed: int,
                       max_new_tokens: Optional[int]) -> tuple[dict[str, float], dict[str, list[SampleResult]]]:
    """``({"sample_cer_<code>": ..., "sample_stop_rate_<code>": ...}, {code: [SampleResult, ...]})``.

    Samples go to ``out_dir/<code>_<j>_<clip stem>.wav``; languages without a recogniser are skipped.
    """

    metrics: dict[str, float] = {}
    samples: dict[str, list[SampleResult]] = {}
    for lang in languages:
        if lang.recognizer is None:
            continue
        code = lang.language
        requests = [(f"{code}_{j}_{Path(wav).stem}", j, text, Path(wav)) for j, (wav, text) in enumerate(lang.clips)]
        results = synthesize_requests(xtts, tokenizer, requests, out_dir, language=code, temperature=temperature,
                                      seed=seed, max_new_tokens=max_new_tokens)  # its pace is not the run's: unchecked
        raise_if_stopped(f"the {code} sample scoring")
        for s, heard in zip(results, lang.recognizer.transcribe_files([s.path for s in results])):
            s.recognized_text = heard
            s.cer = error_rates(s.text, heard, language=code).cer
        samples[code] = results
        for key, value in ((f"sample_cer_{code}", _mean([s.cer for s in results])),
                           (f"sample_stop_rate_{code}", _mean([float(s.ended_with_stop) for s in results]))):
            if value is not None:
                metrics[key] = value
    return metrics, samples
