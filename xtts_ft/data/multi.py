"""Several datasets in one run: prepare each on its own, then one training set and one report over all.

Each dataset is prepared by :func:`prepare_dataset` into ``<out_dir>/datasets/<i>_<name>/`` (its
own wavs/, cache, report and rejected.tsv, so adding a dataset does not redo the others). The
top-level ``metadata_train.csv`` / ``metadata_eval.csv`` list every kept clip with a fourth
column, ``language``; ``report.json`` sums the counts and lists each dataset's own in
``datasets``; ``rejected.tsv`` holds every rejected clip, its id prefixed with the dataset's folder.

Text: clips in the run's language go through the project's normaliser (as a single dataset
does); clips in a language XTTS-v2 already knows are stored as written (whitespace collapsed), so
that the tokenizer applies coqui's own cleaners for that language at training time, exactly as
the base model was trained, and never the Amharic normaliser.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Optional

import soundfile as sf

from xtts_ft.config import DatasetConfig
from xtts_ft.data.checks import Normalizer
from xtts_ft.data.derived import PieceMaker
from xtts_ft.data.metadata import read_metadata, write_metadata
from xtts_ft.data.prepare import prepare_dataset
from xtts_ft.data.reasons import REASONS, Rejection
from xtts_ft.data.report import (
    MAX_EXAMPLES,
    DatasetSummary,
    PrepareReport,
    RejectionExample,
    SpeakerDetail,
    combine_short_clips,
    snr_summary,
    stats,
    write_rejections,
    write_reports,
)
from xtts_ft.data.transcript_check import FileTranscriber
from xtts_ft.layout import DATASETS_SUBDIR, EVAL_CSV, TRAIN_CSV

log = logging.getLogger(__name__)


def dataset_folder_name(index: int, ds: DatasetConfig) -> str:
    """'0_amharic_demo' for dataset 0 at .../amharic_demo; Hub ids use their name part."""
    base = re.sub(r"[^\w.-]+", "_", Path(ds.path.rstrip("/")).name).strip("._") or "dataset"
    return f"{index}_{base[:60]}"


def _as_written(text: str) -> str:
    """Base-language text: left to coqui's cleaners for that language at tokenisation."""
    return text


def prepare_datasets(
    datasets: list[tuple[DatasetConfig, str]],
    out_dir: Path,
    run_language: str,
    *,
    normalizer: Normalizer,
    progress: bool = True,
    recognizer: Optional[FileTranscriber] = None,
    piece_maker: Optional[PieceMaker] = None,
) -> PrepareReport:
    """Prepare every (dataset, language) into ``out_dir``; returns the combined report."""
    out_dir = Path(out_dir)
    reports: list[tuple[str, str, PrepareReport]] = []
    for i, (ds, language) in enumerate(datasets):
        name = dataset_folder_name(i, ds)
        log.info("prepare: dataset %d/%d %s (%s)", i + 1, len(datasets), ds.path, language)
        own = language == run_language
        report = prepare_dataset(
            ds, out_dir / DATASETS_SUBDIR / name, normalizer=normalizer if own else _as_written,
            progress=progress, recognizer=recognizer if own else None, piece_maker=piece_maker if own else None,
        )
        reports.append((name, language, report))
    for file_name in (TRAIN_CSV, EVAL_CSV):
        rows: list[tuple[str, str, str, str]] = []
        for name, language, _ in reports:
            for row in read_metadata(out_dir / DATASETS_SUBDIR / name / file_name):
                rel = Path(row["audio_file"]).relative_to(out_dir.resolve()).as_posix()
                rows.append((rel, row["text"], row["speaker_name"], language))
        write_metadata(out_dir / file_name, rows, with_language=True)
    combined = _combine(reports, out_dir)
    kept = _kept_series(out_dir)
    combined.duration_stats, combined.chars_per_second_stats = stats(kept[0]), stats(kept[1])
    write_reports(combined, out_dir, kept, ([], []))
    write_rejections(out_dir / "rejected.tsv", _rejections(reports, out_dir))
    return combined


def _combine(reports: list[tuple[str, str, PrepareReport]], out_dir: Path) -> PrepareReport:
    rejected = {reason: sum(r.rejected.get(reason, 0) for _, _, r in reports) for reason in REASONS}
    speakers: dict[str, int] = {}
    speaker_detail: dict[str, SpeakerDetail] = {}
    examples: dict[str, list[RejectionExample]] = {}
    for name, _, r in reports:
        for spk, d in r.speaker_detail.items():
            mine = speaker_detail.setdefault(spk, SpeakerDetail(kept=0, train=0, eval=0, hours=0.0))
            mine["kept"] += d["kept"]
            mine["train"] += d["train"]
            mine["eval"] += d["eval"]
            mine["hours"] = round(mine["hours"] + d["hours"], 4)
            speakers[spk] = mine["kept"]
        for reason, items in r.examples.items():
            room = MAX_EXAMPLES - len(examples.setdefault(reason, []))
            examples[reason].extend({**e, "clip": f"{name}/{e['clip']}"} for e in items[:max(room, 0)])
    per_dataset = [
        DatasetSummary(name=name, path=r.dataset, layout=r.layout, language=language, total=r.total, kept=r.kept,
                       kept_train=r.kept_train, kept_eval=r.kept_eval, hours=r.hours, rejected_total=r.rejected_total,
                       rejected={k: v for k, v in r.rejected.items() if v}, folder=f"{DATASETS_SUBDIR}/{name}")
        for name, language, r in reports
    ]
    return PrepareReport(
        kept=sum(r.kept for _, _, r in reports),
        kept_train=sum(r.kept_train for _, _, r in reports),
        kept_eval=sum(r.kept_eval for _, _, r in reports),
        rejected=rejected,
        hours=round(sum(r.hours for _, _, r in reports), 4),
        speakers=dict(sorted(speakers.items())),
        dataset=", ".join(r.dataset for _, _, r in reports),
        out_dir=str(out_dir),
        layout="+".join(sorted({r.layout for _, _, r in reports})),
        total=sum(r.total for _, _, r in reports),
        processed=sum(r.processed for _, _, r in reports),
        reused=sum(r.reused for _, _, r in reports),
        examples={k: v for k, v in examples.items() if v},
        speaker_detail=dict(sorted(speaker_detail.items())),
        speakers_without_eval=sorted({s for _, _, r in reports for s in r.speakers_without_eval}),
        seconds=round(sum(r.seconds for _, _, r in reports), 2),
        datasets=per_dataset,
        short_clips=combine_short_clips([r.short_clips for _, _, r in reports]),
        snr=snr_summary([v for _, _, r in reports for v in r.snr_values],
                        sum(r.snr.get("unmeasured", 0) for _, _, r in reports),
                        min((t for _, _, r in reports if (t := r.snr.get("min_snr_db")) is not None), default=None),
                        rejected["noisy"]),
        snr_values=[v for _, _, r in reports for v in r.snr_values],
    )


def _kept_series(out_dir: Path) -> tuple[list[float], list[float]]:
    """(durations, chars/s) of every kept clip, for report.png (header reads only: no audio decoded)."""
    durations: list[float] = []
    cps: list[float] = []
    for file_name in (TRAIN_CSV, EVAL_CSV):
        for row in read_metadata(out_dir / file_name):
            info = sf.info(row["audio_file"])
            d = info.frames / info.samplerate
            durations.append(d)
            cps.append(len(row["text"]) / d if d > 0 else 0.0)
    return durations, cps


def _rejections(reports: list[tuple[str, str, PrepareReport]], out_dir: Path) -> list[Rejection]:
    """Every dataset's rejected.tsv rows, clip ids prefixed with the dataset's folder name."""
    out: list[Rejection] = []
    for name, _, _ in reports:
        lines = (out_dir / DATASETS_SUBDIR / name / "rejected.tsv").read_text(encoding="utf-8").splitlines()[1:]
        for line in lines:
            clip, reason, where, detail = (line.split("\t") + ["", "", "", ""])[:4]
            out.append(Rejection(f"{name}/{clip}", reason, detail, where))
    return out
