"""Prepare a dataset for fine-tuning: read, check, convert, split, and report every clip.

Pipeline per clip, first failing check wins (see ``reasons.REASONS`` for the order):
reader (bad_row, outside_root, missing_file) -> transcript (empty_text, text_too_long,
unencodable_text) -> audio in worker processes (unreadable ... too_long; cached) ->
chars_per_second, duplicate_audio, duplicate_text (clips in id order, the first one wins)
-> hash-based train/eval split -> ``metadata_train.csv`` / ``metadata_eval.csv`` / ``wavs/`` /
``report.json`` / ``report.txt`` / ``report.png`` / ``rejected.tsv`` (every rejected clip) in ``out_dir``.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import defaultdict
from pathlib import Path
from typing import Callable, Optional

from xtts_ft.config import DatasetConfig, config_from_dict, is_short_text
from xtts_ft.data.audio import AudioJob, AudioResult, AudioSettings
from xtts_ft.data.cache import WAVS_DIR, Manifest, clip_key
from xtts_ft.data.checks import Normalizer, PostChecks, as_text_function, assign_names, check_text
from xtts_ft.data.derived import PieceMaker, SourceClip, add_pieces, install_pieces, piece_rows
from xtts_ft.data.entries import SourceEntry
from xtts_ft.data.hf_source import read_hf, source_label
from xtts_ft.data.metadata import write_metadata
from xtts_ft.data.readers import read_entries
from xtts_ft.data.reasons import REASONS, Rejection
from xtts_ft.data.report import (
    MAX_EXAMPLES,
    PrepareReport,
    RejectionExample,
    SpeakerDetail,
    short_clip_share,
    snr_summary,
    stats,
    write_rejections,
    write_reports,
)
from xtts_ft.data.runner import run_jobs
from xtts_ft.data.split import Split, split_clips
from xtts_ft.data.transcript_check import FileTranscriber, check_transcripts
from xtts_ft.errors import ConfigError, DataError
from xtts_ft.layout import DATA_REPORT_TEXT, EVAL_CSV, TRAIN_CSV

log = logging.getLogger(__name__)

SAVE_EVERY = 250  # results between two saves of the cache manifest (an interrupted run resumes)


def prepare_dataset(
    cfg: DatasetConfig,
    out_dir: Path,
    *,
    normalizer: Normalizer,
    allowed_chars: Optional[Callable[[str], bool]] = None,
    progress: bool = True,
    recognizer: Optional[FileTranscriber] = None,
    piece_maker: Optional[PieceMaker] = None,
    settings_from: Optional[str] = None,
) -> PrepareReport:
    """Prepare ``cfg.path`` into ``out_dir``; re-runs only process new or changed clips.

    ``normalizer``: text front-end (str -> str or NormalizedText): the run's, from
    ``xtts_ft.text_settings.make_normalizer``. ``allowed_chars``: predicate per
    character (spaces excluded) from the tokenizer; None skips the unencodable_text check.
    ``recognizer``: an :class:`xtts_ft.asr.recognizer.Recognizer`, required when
    ``cfg.transcript_check`` is set (see :mod:`xtts_ft.data.transcript_check`). ``piece_maker``: makes
    short pieces of the training clips for ``cfg.short_clips`` (:mod:`xtts_ft.data.derived`); None: none
    are made, and the report says why. ``settings_from``: how the command that prepares (not a training run) sets
    dataset.* options, said in a stop's advice; None: a training run, whose config and --set do.
    Raises DataError when the dataset cannot be read, no clip is kept, or more than
    ``cfg.cut_ending_max_share`` of the clips were rejected as ``cut_ending`` (the reports are written first).
    """
    started = time.monotonic()
    root, out_dir = _check_paths(cfg, Path(out_dir))
    normalize = as_text_function(normalizer)
    exclude = out_dir if root in out_dir.parents else None
    out_dir.mkdir(parents=True, exist_ok=True)
    if cfg.format == "hf":
        layout, entries = "hf", read_hf(cfg, out_dir)
    else:
        layout, entries = read_entries(root, cfg.format, cfg.speaker_name, cfg.metadata_files, exclude)
    (out_dir / WAVS_DIR).mkdir(exist_ok=True)

    settings = AudioSettings.from_config(cfg)
    names = assign_names(e.clip_id for e in entries if e.audio is not None)
    manifest = Manifest.load(out_dir, root)
    rejections: list[Rejection] = []
    texts: dict[str, str] = {}
    results: dict[str, AudioResult] = {}
    jobs: list[AudioJob] = []
    keys: dict[str, str] = {}  # clip id -> its audio cache key
    passed: list[SourceEntry] = []  # entries that reach the audio stage
    for e in entries:
        problem = e.rejection
        if problem is None:
            texts[e.clip_id], problem = check_text(e.text, normalize, cfg.max_text_chars, allowed_chars)
        if problem is not None:
            rejections.append(Rejection(e.clip_id, problem[0], problem[1], e.where))
            continue
        passed.append(e)
        assert e.audio is not None  # the readers give every entry they do not reject its audio file
        st = e.audio.stat()
        name = names[e.clip_id]
        keys[e.clip_id] = clip_key(e.clip_id, st.st_size, st.st_mtime_ns, settings, name)
        cached = manifest.lookup(e.clip_id, keys[e.clip_id])
        if cached is not None:
            results[e.clip_id] = cached
        else:
            jobs.append(AudioJob(e.clip_id, str(e.audio), str(out_dir / WAVS_DIR / name), settings))

    def on_result(result: AudioResult) -> None:
        results[result.clip_id] = result
        manifest.store(keys[result.clip_id], names[result.clip_id], result)
        if len(results) % SAVE_EVERY == 0:
            manifest.save()

    try:
        run_jobs(jobs, cfg.num_workers, on_result, progress)
    finally:
        manifest.save()

    passed.sort(key=lambda e: e.clip_id)
    post = PostChecks(cfg.min_chars_per_second, cfg.max_chars_per_second, cfg.min_snr_db)
    kept: list[SourceEntry] = []
    plot_rejected: tuple[list[float], list[float]] = ([], [])
    for e in passed:
        r = results[e.clip_id]
        problem = (r.reason, r.detail) if r.reason else post.check(e.clip_id, texts[e.clip_id], e.speaker, r)
        if problem is None:
            kept.append(e)
            continue
        rejections.append(Rejection(e.clip_id, problem[0], problem[1], e.where))
        if r.duration_s > 0:
            plot_rejected[0].append(r.duration_s)
            plot_rejected[1].append(len(texts[e.clip_id]) / r.duration_s)

    cer_values: list[float] = []
    if cfg.transcript_check is not None:
        kept, cer_values = _transcript_check(cfg, kept, texts, names, keys, out_dir, recognizer, rejections)

    split = split_clips([(e.clip_id, e.speaker) for e in kept], cfg.eval_fraction, cfg.eval_max_clips, cfg.split_by_speaker)
    train = [SourceClip(e.clip_id, texts[e.clip_id], e.speaker, out_dir / WAVS_DIR / names[e.clip_id])
             for e in kept if e.clip_id not in split.eval_ids]  # eval clips never give training pieces
    short = sum(1 for e in kept if is_short_text(texts[e.clip_id]))
    pieces, piece_summary = add_pieces(cfg, out_dir, train, len(kept), short, piece_maker)
    install_pieces(out_dir, pieces)  # after every stoppable step: a stop above leaves the dataset as it was
    for file_name, in_eval in ((TRAIN_CSV, False), (EVAL_CSV, True)):
        rows = [
            (f"{WAVS_DIR}/{names[e.clip_id]}", texts[e.clip_id], e.speaker)
            for e in kept
            if (e.clip_id in split.eval_ids) == in_eval
        ]
        write_metadata(out_dir / file_name, rows + ([] if in_eval else piece_rows(pieces)))
    manifest.place({names[e.clip_id] for e in kept}, (e.clip_id for e in entries if e.audio is not None))
    manifest.save()

    report = _build_report(root, out_dir, layout, entries, kept, split, results, texts, rejections)
    report.processed, report.reused = len(jobs), len(results) - len(jobs)
    report.seconds = round(time.monotonic() - started, 2)
    durations = [results[e.clip_id].duration_s for e in kept]
    cps = [len(texts[e.clip_id]) / results[e.clip_id].duration_s for e in kept]
    bounds = {
        "duration": (cfg.min_duration_s, cfg.max_duration_s),
        "chars_per_second": (cfg.min_chars_per_second, cfg.max_chars_per_second),
    }
    report.transcript_cer_stats = stats(cer_values) if cfg.transcript_check is not None else {}
    report.short_clips = short_clip_share(durations + [p.duration_s for p in pieces],
                                          [texts[e.clip_id] for e in kept] + [p.text for p in pieces],
                                          cfg.short_clip_min_share)
    report.short_pieces = piece_summary
    measured = [results[e.clip_id].snr_db for e in passed if results[e.clip_id].reason is None]
    report.snr_values = [v for v in measured if v is not None]
    report.snr = snr_summary(report.snr_values, len(measured) - len(report.snr_values), cfg.min_snr_db,
                             report.rejected["noisy"])
    if report.noisy_warning():
        log.warning("dataset '%s': %s", root, report.noisy_warning())
    write_reports(report, out_dir, (durations, cps), plot_rejected, bounds)
    write_rejections(out_dir / "rejected.tsv", rejections)
    log.info("prepared %d of %d clips into %s (%.1f s)", report.kept, report.total, out_dir, report.seconds)
    _check_cut_share(cfg, root, out_dir, report.rejected["cut_ending"], len(passed), settings_from)
    if report.kept == 0:
        top = ", ".join(f"{r} {c}" for r, c in report.top_reasons()) or "none"
        raise DataError(
            f"dataset '{root}': no usable clips out of {report.total} (top rejections: {top}); "
            f"see {out_dir / DATA_REPORT_TEXT} for examples"
        )
    return report


def _check_cut_share(cfg: DatasetConfig, root: Path, out_dir: Path, cut: int, checked: int,
                     settings_from: Optional[str] = None) -> None:
    """Stop when more than ``dataset.cut_ending_max_share`` of the clips whose audio was read end in a cut word.

    So many cut words are more often a measure that does not fit these recordings than a segmenter
    that cut them all: the user listens and decides, instead of a fine-tune on what is left. The advice
    speaks of training only in a training run (``settings_from`` None: its config and --set set the options).
    """
    if checked == 0 or cut <= cfg.cut_ending_max_share * checked:
        return
    stop, keep = ("stopped before training on the rest", "to train on the rest") if settings_from is None else \
        ("prepare stops here", "to keep the rest")
    raise DataError(
        f"dataset '{root}': {cut} of {checked} clips ({cut / checked:.0%}) end in speech and were rejected as "
        f"cut_ending, more than dataset.cut_ending_max_share ({cfg.cut_ending_max_share:.0%}); {stop}. Listen to "
        f"a few (listed in {out_dir / 'rejected.tsv'}): re-cut the clips whose last word is cut off, set "
        f"dataset.cut_ending_check: false if they end cleanly, or raise dataset.cut_ending_max_share {keep}"
        + (f"; {settings_from}" if settings_from else "")
    )


def _transcript_check(cfg: DatasetConfig, kept: list[SourceEntry], texts: dict[str, str], names: dict[str, str],
                      keys: dict[str, str], out_dir: Path, recognizer: Optional[FileTranscriber],
                      rejections: list[Rejection]) -> tuple[list[SourceEntry], list[float]]:
    """Reject kept clips the recogniser hears as something else; returns (still kept, CER of every checked clip)."""
    if recognizer is None:
        raise ConfigError("dataset.transcript_check is set but no speech recogniser was loaded; set asr.model "
                          "(or dataset.transcript_check: null)")
    clips = [(e.clip_id, texts[e.clip_id], out_dir / WAVS_DIR / names[e.clip_id], keys[e.clip_id]) for e in kept]
    check = check_transcripts(clips, recognizer, out_dir)
    assert cfg.transcript_check is not None  # the caller checks only when it is set
    bad = check.mismatches(cfg.transcript_check)
    still = []
    for e in kept:
        if e.clip_id in bad:
            cer, heard = bad[e.clip_id]
            detail = f"CER {cer:.2f} > {cfg.transcript_check:g}; heard: {heard or '(nothing)'}"
            rejections.append(Rejection(e.clip_id, "transcript_mismatch", detail, e.where))
        else:
            still.append(e)
    log.info("transcript check: %d clips heard (%d reused), %d rejected as transcript_mismatch",
             len(check.results), check.reused, len(bad))
    return still, [cer for cer, _ in check.results.values()]


def _check_paths(cfg: DatasetConfig, out_dir: Path) -> tuple[Path, Path]:
    problems: list[str] = []
    if cfg.format == "hf":  # a parquet/arrow file or folder, or a Hub id (the reader checks it)
        cfg.check(problems)
        if problems:
            raise ConfigError("; ".join(problems))
        return Path(source_label(cfg)), out_dir.resolve()
    if not cfg.path or not Path(cfg.path).is_dir():
        raise DataError(f"dataset folder '{cfg.path}' does not exist; set dataset.path (or --input) to your dataset")
    cfg.check(problems)
    if problems:
        raise ConfigError("; ".join(problems))
    root, out = Path(cfg.path).resolve(), out_dir.resolve()
    if out == root:
        raise DataError(f"output folder '{out_dir}' is the dataset folder itself; choose another --out folder")
    if out.exists() and not out.is_dir():
        raise DataError(f"output '{out_dir}' exists and is not a folder; choose another --out folder")
    return root, out


def _build_report(root: Path, out_dir: Path, layout: str, entries: list[SourceEntry], kept: list[SourceEntry],
                  split: Split, results: dict[str, AudioResult], texts: dict[str, str],
                  rejections: list[Rejection]) -> PrepareReport:
    counts = {reason: 0 for reason in REASONS}
    examples: dict[str, list[RejectionExample]] = {reason: [] for reason in REASONS}
    for rej in sorted(rejections, key=lambda r: r.clip_id):
        counts[rej.reason] += 1
        if len(examples[rej.reason]) < MAX_EXAMPLES:
            examples[rej.reason].append(RejectionExample(clip=rej.clip_id, where=rej.where, detail=rej.detail))
    detail: dict[str, SpeakerDetail] = defaultdict(lambda: SpeakerDetail(kept=0, train=0, eval=0, hours=0.0))
    for e in kept:
        d = detail[e.speaker]
        d["kept"] += 1
        d["eval" if e.clip_id in split.eval_ids else "train"] += 1
        d["hours"] += results[e.clip_id].duration_s / 3600.0
    for d in detail.values():
        d["hours"] = round(d["hours"], 4)
    durations = [results[e.clip_id].duration_s for e in kept]
    if len(kept) + len(rejections) != len(entries):  # every entry is kept or rejected exactly once
        raise RuntimeError(f"clip accounting is off: {len(kept)} kept + {len(rejections)} rejected != {len(entries)}")
    return PrepareReport(
        kept=len(kept),
        kept_train=len(kept) - len(split.eval_ids),
        kept_eval=len(split.eval_ids),
        rejected=counts,
        hours=round(sum(durations) / 3600.0, 4),
        speakers={s: d["kept"] for s, d in sorted(detail.items())},
        dataset=str(root),
        out_dir=str(out_dir),
        layout=layout,
        total=len(entries),
        examples={r: ex for r, ex in examples.items() if ex},
        speaker_detail=dict(sorted(detail.items())),
        speakers_without_eval=split.speakers_without_eval,
        duration_stats=stats(durations),
        chars_per_second_stats=stats([len(texts[e.clip_id]) / results[e.clip_id].duration_s for e in kept]),
    )


def prepare_command(input_dir: Path, out_dir: Path, fmt: str = "auto", *, normalizer: Normalizer,
                    config: Optional[DatasetConfig] = None, allowed_chars: Optional[Callable[[str], bool]] = None,
                    progress: bool = True, **overrides: object) -> PrepareReport:
    """``python -m xtts_ft prepare --input DIR --out DIR [--format ...] [--config RUN.yaml]``: config from flags,
    then prepare.

    ``config``: a run config's dataset section, whose settings apply (but its path and format: those are
    ``input_dir`` and ``fmt``). ``overrides`` are DatasetConfig fields (e.g. ``eval_fraction=0.1``) on top,
    type-checked like the YAML config; ``allowed_chars`` and ``progress`` go to :func:`prepare_dataset`. Unknown
    keys raise ConfigError.
    """
    if fmt != "hf" and not Path(input_dir).is_dir():
        raise DataError(f"--input '{input_dir}' is not a folder; pass your dataset folder")
    base = {} if config is None else {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    raw = {**base, "path": str(input_dir), "format": fmt, **overrides}
    cfg = config_from_dict({"dataset": raw}, source="prepare").dataset
    how = ("set them in the --config file or with --set, e.g. --set dataset.cut_ending_max_share=0.3" if config is not None else
           "prepare takes them from a run config: add --config RUN.yaml (then --set "
           "dataset.cut_ending_max_share=0.3 works too)")
    return prepare_dataset(cfg, Path(out_dir), normalizer=normalizer, allowed_chars=allowed_chars, progress=progress,
                           settings_from=how)
