"""The evaluation hook the trainer calls: ``eval_hook(step, model) -> dict[str, float]``.

At each evaluation it synthesises the configured test sentences in every reference voice into
``<run_dir>/samples/step_XXXXXX/``, re-synthesises up to ``evaluation.mcd_clips`` eval clips
(their own text, their own recording as the voice) to measure MCD against the recording,
appends one :class:`~xtts_ft.run_history.EvalRecord` to the run's evaluations (read by the report), logs the
audio to TensorBoard when a writer is given, and returns averaged scalars for the trainer to log.
The model comes back in the train/eval state it arrived in. When the training run is asked to
stop, the evaluation is abandoned within a generated token (``StopRequested``), its half-written
sample folder removed.
"""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, Sequence

import torch

from xtts_ft.audio_io import DATASET_RATE, load_audio
from xtts_ft.config import Config
from xtts_ft.errors import DataError
from xtts_ft.evaluate.cer_floor import measure_cer_floor
from xtts_ft.evaluate.intelligibility import Transcriber, finite_mean, intelligibility_metrics, score_samples
from xtts_ft.evaluate.languages import LanguageEval, evaluate_languages, say_why_no_cer
from xtts_ft.evaluate.listening import SampleListener, listen_to_samples, quality_metrics, reference_quality
from xtts_ft.evaluate.metrics import mcd_files
from xtts_ft.evaluate.synthesis import SampleResult, check_language, sample_requests, synthesize_requests
from xtts_ft.layout import RunLayout
from xtts_ft.run_history import EvalRecord, append_evaluation
from xtts_ft.stop_signals import StopRequested, raise_if_stopped

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

    from xtts_ft.model import XttsTrainingModel
    from xtts_ft.tokenizer import AmharicTokenizer

log = logging.getLogger(__name__)

MCD_SAMPLE_RATE = DATASET_RATE  # both the recording and the synthesis are resampled to this for MCD

#: What :func:`make_eval_hook` builds: a trainer's ``EvalHook`` (xtts_ft/train/hooks.py) whose metrics are always
#: numbers, so a caller here (the standalone evaluation) reads them without checking.
MetricsHook = Callable[[int, "XttsTrainingModel"], dict[str, float]]



def summarize(samples: Sequence[SampleResult], mcd_samples: Sequence[SampleResult]) -> dict[str, float]:
    """Averaged scalars over one evaluation; keys absent when there is nothing to average."""
    out: dict[str, Optional[float]] = {}
    if samples:
        out["sample_stop_rate"] = finite_mean([float(s.ended_with_stop) for s in samples])
        out["sample_silence_ratio"] = finite_mean([s.silence_ratio for s in samples])
        out["sample_rtf"] = finite_mean([s.rtf for s in samples])
        out["sample_duration_s"] = finite_mean([s.duration_s for s in samples])
        out["sample_seconds_per_char"] = finite_mean([s.seconds_per_char for s in samples])
        checked = [s.seconds_per_char_in_range for s in samples if s.seconds_per_char_in_range is not None]
        if checked:
            out["sample_rate_in_range"] = finite_mean([float(c) for c in checked])
        out.update(intelligibility_metrics(samples))
    if mcd_samples:
        out["mcd"] = finite_mean([s.mcd for s in mcd_samples])
        out["mcd_stop_rate"] = finite_mean([float(s.ended_with_stop) for s in mcd_samples])
    return {k: v for k, v in out.items() if v is not None}


def _recognizer_name(cfg: Config) -> str:
    return f"{cfg.asr.model}@{cfg.asr.revision or 'main'}"


def _log_audio(writer: SummaryWriter, step: int, results: Sequence[SampleResult], prefix: str) -> None:
    for r in results:
        audio, sr = load_audio(r.path)
        writer.add_audio(f"{prefix}/{r.name}", torch.from_numpy(audio).reshape(1, -1), step, sample_rate=sr)


def evaluate_step(
    step: int,
    model: torch.nn.Module,
    *,
    cfg: Config,
    run_dir: Path,
    tokenizer: AmharicTokenizer,
    speaker_wavs: Sequence[Path],
    eval_clips: Sequence[tuple[Path, str]] = (),
    duration_range: Optional[tuple[float, float]] = None,
    writer: Optional[SummaryWriter] = None,
    recognizer: Optional[Transcriber] = None,
    languages: Sequence[LanguageEval] = (),
    listener: Optional[SampleListener] = None,
) -> dict[str, float]:
    """One evaluation of ``model`` (an XttsTrainingModel, possibly DDP-wrapped, or a bare Xtts) at ``step``."""
    model = getattr(model, "module", model)  # DistributedDataParallel wraps the training model
    xtts = getattr(model, "xtts", model)
    ev = cfg.evaluation
    run_dir = Path(run_dir)
    out_dir = RunLayout(run_dir).samples_at(step)
    if out_dir.exists():  # a resumed or rolled-back run evaluates this step again: no stale files
        shutil.rmtree(out_dir)
    started = time.perf_counter()
    # Every module's own flag, not model.training: XttsTrainingModel.train() keeps the wrapper in eval
    # mode while its GPT trains, so one flag cannot say how to restore it.
    modes = [(m, m.training) for m in model.modules()]
    try:
        sample_reqs = sample_requests(list(ev.sentences), list(speaker_wavs))
        clips = list(eval_clips)[: ev.mcd_clips]
        mcd_reqs = [(f"mcd_{j}_{Path(wav).stem}", j, text, Path(wav)) for j, (wav, text) in enumerate(clips)]
        synthesized = synthesize_requests(  # one batch
            xtts, tokenizer, sample_reqs + mcd_reqs, out_dir, language=cfg.run.language, temperature=ev.temperature,
            seed=cfg.run.seed, max_new_tokens=ev.max_new_tokens, seconds_per_char_range=duration_range)
        samples, mcd_samples = synthesized[: len(sample_reqs)], synthesized[len(sample_reqs) :]
        for r in mcd_samples:
            raise_if_stopped("the MCD measurement")
            r.mcd = mcd_files(r.reference_wav, r.path, sr=MCD_SAMPLE_RATE)
        raise_if_stopped("the sample scoring")
        score_samples(samples, xtts, recognizer)  # CER and speaker similarity of each sample
        # the recogniser on the real recordings: measured at the first evaluation, read back after that
        measure_cer_floor(run_dir, recognizer, _recognizer_name(cfg), eval_clips, ev.cer_floor_clips)
        reference, listening = None, time.perf_counter()
        if listener is not None:  # predicted quality and speech after the text; the recordings' quality once per run
            listen_to_samples(samples, listener)
            reference = reference_quality(run_dir, listener, eval_clips, ev.quality_clips)
        listening = time.perf_counter() - listening
        language_metrics, language_samples = evaluate_languages(  # the run's other languages: sample_cer_<code>
            xtts, tokenizer, languages, out_dir, temperature=ev.temperature, seed=cfg.run.seed,
            max_new_tokens=ev.max_new_tokens)
    except StopRequested:  # the run is stopping: no half evaluation is left behind
        shutil.rmtree(out_dir, ignore_errors=True)
        raise
    finally:
        for module, mode in modes:
            module.training = mode
    metrics = {**summarize(samples, mcd_samples), **language_metrics}
    if listener is not None:
        metrics.update(quality_metrics(samples, reference, ev.max_tail_s))
    record = EvalRecord(
        step=int(step),
        time=time.strftime("%Y-%m-%dT%H:%M:%S"),
        dir=out_dir.relative_to(run_dir).as_posix(),
        samples=tuple(s.to_json(relative_to=run_dir) for s in samples),
        mcd_samples=tuple(s.to_json(relative_to=run_dir) for s in mcd_samples),
        language_samples={code: tuple(s.to_json(relative_to=run_dir) for s in found)
                          for code, found in language_samples.items()},
        metrics=metrics,
        seconds_per_char_range=duration_range,
        eval_seconds=round(time.perf_counter() - started, 3),
    )
    append_evaluation(run_dir, record)
    if writer is not None:
        _log_audio(writer, step, samples, "samples")
        _log_audio(writer, step, mcd_samples, "mcd_samples")
        for code, found in language_samples.items():
            _log_audio(writer, step, found, f"samples_{code}")
    log.info(
        "step %d: %d samples, %d MCD clips in %.1f s (%.1f s of it listening): %s", step, len(samples),
        len(mcd_samples), record.eval_seconds, listening, ", ".join(f"{k}={v:.3g}" for k, v in metrics.items()),
    )
    return metrics


def make_eval_hook(
    cfg: Config,
    run_dir: Path,
    tokenizer: AmharicTokenizer,
    speaker_wavs: Sequence[Path],
    eval_clips: Sequence[tuple[Path, str]],
    duration_range: Optional[tuple[float, float]],
    *,
    writer: Optional[SummaryWriter] = None,
    recognizer: Optional[Transcriber] = None,
    languages: Sequence[LanguageEval] = (),
    listener: Optional[SampleListener] = None,
) -> MetricsHook:
    """``hook(step, model) -> dict[str, float]`` for the trainer.

    ``duration_range`` is the training data's seconds-per-character range ``(lo, hi)`` (None: not
    checked). ``eval_clips`` are ``(wav_path, text)`` pairs; the first ``evaluation.mcd_clips`` are used.
    ``recognizer`` (an :class:`xtts_ft.asr.recognizer.Recognizer`, see
    :func:`xtts_ft.evaluate.intelligibility.load_eval_recognizer`) transcribes every sample for CER;
    None: no CER (speaker similarity is always measured). ``languages`` are the run's other languages
    (:func:`xtts_ft.evaluate.languages.language_evals`): CER per language where each has a recogniser.
    ``listener`` (:class:`xtts_ft.assess.listener.Listener`, made above this package when ``evaluation.quality``
    is on) listens to every sample: :mod:`xtts_ft.evaluate.listening`; None: no quality keys.
    Bad inputs (missing reference wavs, a vocabulary without the language token) fail here, at
    construction, not hours into training.
    """
    speaker_wavs = [Path(p) for p in speaker_wavs]
    eval_clips = [(Path(w), str(t)) for w, t in eval_clips]
    if not speaker_wavs and cfg.evaluation.sentences:
        raise DataError("evaluation: no reference voice; set evaluation.speaker_wavs or keep eval clips in the data")
    measured = max(cfg.evaluation.mcd_clips, cfg.evaluation.cer_floor_clips if recognizer is not None else 0,
                   cfg.evaluation.quality_clips if listener is not None else 0)
    for wav in speaker_wavs + [w for w, _ in eval_clips[:measured]]:
        if not wav.is_file():
            raise DataError(f"evaluation: reference wav '{wav}' does not exist")
    check_language(tokenizer, cfg.run.language)
    for lang in languages:
        if lang.recognizer is not None:
            check_language(tokenizer, lang.language)
            for wav, _ in lang.clips:
                if not Path(wav).is_file():
                    raise DataError(f"evaluation: {lang.language} eval clip '{wav}' does not exist")
    say_why_no_cer(languages)
    if duration_range is not None:
        lo, hi = (float(x) for x in duration_range)
        duration_range = (lo, hi)

    def eval_hook(step: int, model: XttsTrainingModel) -> dict[str, float]:
        return evaluate_step(
            step, model, cfg=cfg, run_dir=Path(run_dir), tokenizer=tokenizer, speaker_wavs=speaker_wavs,
            eval_clips=eval_clips, duration_range=duration_range, writer=writer, recognizer=recognizer,
            languages=languages, listener=listener,
        )

    return eval_hook
