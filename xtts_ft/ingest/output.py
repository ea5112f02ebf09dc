"""What ingest writes: the clips, metadata.csv, segments.tsv and the ingest report.

``DIR/metadata.csv`` is the coqui CSV layout ``prepare`` reads (``audio_file|text|speaker_name``) with
one more column, ``transcript_source`` (``given`` or ``machine``), which the coqui reader ignores.
``DIR/segments.tsv`` has one row per clip made: where in which source file it was cut, its score and
how it was found. ``DIR/ingest_report.json`` / ``.md`` count clips made and rejected (by reason, with
every rejected clip listed), hours, per source file, text that had no audio, and the subtitle offset.
Clips are 16-bit mono WAV at the source file's rate (``prepare`` resamples them).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, TypedDict

import numpy as np
import numpy.typing as npt
import soundfile as sf

from xtts_ft.data.audio import to_pcm16
from xtts_ft.ingest.clips import Clip
from xtts_ft.ingest.source_audio import SourceFile, read_range
from xtts_ft.layout import EARLIER_INGESTS
from xtts_ft.stop_signals import raise_if_stopped
from xtts_ft.tempfiles import atomic_write

SEGMENTS_HEADER = ["clip_file", "source_file", "start_s", "end_s", "score", "method"]


# The shapes of the report's parts, as ingest_report.json holds them.
class SourceSummary(TypedDict):
    path: str
    hours: float
    clips: int
    rejected: int
    hours_kept: float


class RejectedClip(TypedDict):
    source: str  # the recording
    start_s: float
    end_s: float
    reason: str
    detail: str
    text: str


class LostText(TypedDict):
    """A sentence (or cue) of the text for which no audio was found."""

    sentence: int  # 1-based
    text: str
    why: Optional[str]


class UnreadCueRow(TypedDict):
    line: int
    timing: str
    text: str


class _SubtitleSummary(TypedDict):
    summary: str
    corrected: bool


class SubtitleOffset(_SubtitleSummary, total=False):
    """How far the speech lies from the cues; the numbers only when some cue's text was found in the audio."""

    offset_s: float
    drift_s_per_hour: float
    cues_used: int
    residual_s: float


@dataclass
class IngestReport:
    mode: str  # text | vad | subtitles
    out_dir: str
    clips: int = 0
    rejected: dict[str, int] = field(default_factory=dict)  # reason -> count
    hours: float = 0.0
    source_hours: float = 0.0
    machine_transcripts: bool = False
    sources: list[SourceSummary] = field(default_factory=list)  # per file
    rejected_clips: list[RejectedClip] = field(default_factory=list)  # every rejected clip
    text_without_audio: list[LostText] = field(default_factory=list)  # sentences/cues with no audio found
    unread_cues: list[UnreadCueRow] = field(default_factory=list)  # subtitle cues whose timing line cannot be read
    unknown_letters: dict[str, int] = field(default_factory=dict)  # letters of the text the recogniser has no id for
    subtitle_offset: Optional[SubtitleOffset] = None
    blocks_read: int = 0
    endings_moved: int = 0  # clips whose planned end fell in speech, moved to the next pause (see endings.py)
    seconds: float = 0.0
    added_to_existing: bool = False  # --add-to-existing: the clips were added after an earlier dataset's
    moved_aside: Optional[str] = None  # --move-old-aside: where the folder's earlier content went

    def summary_lines(self) -> list[str]:
        rejected = ", ".join(f"{r} {n}" for r, n in sorted(self.rejected.items())) or "none"
        lines = [f"ingest ({self.mode}): {self.clips} clips, {self.hours:.3f} h of {self.source_hours:.3f} h audio "
                 f"-> {self.out_dir}",
                 f"  rejected: {sum(self.rejected.values())} ({rejected})"]
        if self.endings_moved:
            lines.append(f"  cut words avoided: {self.endings_moved} clip end(s) fell in speech and were moved to the "
                         f"next pause")
        if self.text_without_audio:
            lines.append(f"  text without audio: {len(self.text_without_audio)} sentence(s), first: "
                         f"#{self.text_without_audio[0]['sentence']} {self.text_without_audio[0]['text'][:50]}")
        if self.unread_cues:
            first = self.unread_cues[0]
            lines.append(f"  subtitle cues with a timing that cannot be read (left out, fix them): "
                         f"{len(self.unread_cues)}, first: line {first['line']} '{first['timing']}' {first['text'][:50]}")
        if self.machine_transcripts:
            lines.append("  transcripts are MACHINE transcripts (the recogniser's): check them before training")
        if self.subtitle_offset:
            lines.append(f"  subtitles: {self.subtitle_offset['summary']}")
        if self.added_to_existing:
            lines.append(f"  added to the dataset already in {self.out_dir}: its rows and files are kept")
        if self.moved_aside:
            lines.append(f"  the folder's earlier content was moved to {self.moved_aside}")
        lines.append(f"  report: {Path(self.out_dir) / 'ingest_report.md'}")
        return lines

    def markdown(self) -> str:
        out = [f"# Ingest report ({self.mode})", "",
               f"- clips made: {self.clips} ({self.hours:.3f} h of {self.source_hours:.3f} h of audio)",
               f"- rejected: {sum(self.rejected.values())}"]
        out += [f"  - {reason}: {n}" for reason, n in sorted(self.rejected.items())]
        out.append(f"- cut words avoided: {self.endings_moved} clip end(s) fell in speech and were moved to the next "
                   f"pause (clips with no pause near their end are rejected as cut_ending)")
        machine = "machine (recogniser output, not checked by a person)"
        out.append(f"- transcripts: {machine if self.machine_transcripts else 'given'}")
        if self.subtitle_offset:
            out.append(f"- subtitles: {self.subtitle_offset['summary']}")
        if self.unknown_letters:
            out.append(f"- letters the recogniser cannot hear (left out of the alignment): {self.unknown_letters}")
        out += ["", "## Per source file", "", "| file | hours | clips | rejected | hours kept |", "|---|---|---|---|---|"]
        out += [f"| {s['path']} | {s['hours']:.3f} | {s['clips']} | {s['rejected']} | {s['hours_kept']:.3f} |"
                for s in self.sources]
        if self.text_without_audio:
            out += ["", "## Text with no audio found (not used)", ""]
            out += [f"- sentence {t['sentence']}: {t['text']} ({t['why']})" for t in self.text_without_audio]
        if self.unread_cues:
            out += ["", "## Subtitle cues whose timing cannot be read (not used; fix the timing line)", ""]
            out += [f"- line {u['line']}: `{u['timing']}` {u['text']}" for u in self.unread_cues]
        if self.rejected_clips:
            out += ["", "## Rejected clips", "", "| source | start s | end s | reason | detail |", "|---|---|---|---|---|"]
            out += [f"| {r['source']} | {r['start_s']:.2f} | {r['end_s']:.2f} | {r['reason']} | {r['detail']} |"
                    for r in self.rejected_clips]
        return "\n".join(out) + "\n"


def _clean(text: str) -> str:
    return " ".join(text.replace("|", " ").split())


def _existing_clips(out_dir: Path) -> tuple[list[str], int]:
    """The header of an existing metadata.csv (or []) and the highest ``clip_N`` number already used."""
    header: list[str] = []
    highest = 0
    metadata = out_dir / "metadata.csv"
    names = [p.name for p in (out_dir / "wavs").glob("clip_*")] if (out_dir / "wavs").is_dir() else []
    if metadata.is_file():
        lines = metadata.read_text(encoding="utf-8-sig").splitlines()
        header = lines[0].split("|") if lines else []
        names += [Path(line.split("|", 1)[0]).name for line in lines[1:]]
    for name in names:
        stem = Path(name).stem
        if stem.startswith("clip_") and stem[5:].isdigit():
            highest = max(highest, int(stem[5:]))
    return header, highest


def _keep_earlier_report(out_dir: Path) -> None:
    """Adding to a dataset: the earlier session's report moves into earlier_ingests/ (never overwritten)."""
    earlier = [p for p in (out_dir / "ingest_report.json", out_dir / "ingest_report.md") if p.is_file()]
    if not earlier:
        return
    folder = out_dir / EARLIER_INGESTS
    folder.mkdir(exist_ok=True)
    session = 1 + len({p.name.split("_", 1)[0] for p in folder.iterdir()})
    for p in earlier:
        os.replace(p, folder / f"{session:03d}_{p.name}")


def write_dataset(clips: list[Clip], sources: list[SourceFile], out_dir: Path, speaker: str,
                  report: IngestReport, adding: bool = False) -> IngestReport:
    """Cut and write every kept clip, then metadata.csv, segments.tsv and the report; fills ``report``.

    ``out_dir`` is the staging folder (see :func:`xtts_ft.output_folder.staged_output`). With
    ``adding`` it already holds an earlier dataset: its rows stay first and untouched, the new clips
    are numbered after the highest clip there, and the earlier report moves to ``earlier_ingests/``.
    """
    wavs = out_dir / "wavs"
    wavs.mkdir(parents=True, exist_ok=True)
    header, number = _existing_clips(out_dir) if adding else ([], 0)
    columns = header or ["audio_file", "text", "speaker_name", "transcript_source"]
    rows: list[str] = []
    segments: list[str] = []
    per_file = [SourceSummary(path=str(s.path), hours=round(s.duration_s / 3600, 4), clips=0, rejected=0, hours_kept=0.0)
                for s in sources]
    reasons: Counter[str] = Counter()
    kept_s = 0.0
    made = 0
    for clip in clips:
        raise_if_stopped("ingest: writing clips")
        source = sources[clip.file]
        if clip.rejection is not None:
            reasons[clip.rejection[0]] += 1
            per_file[clip.file]["rejected"] += 1
            report.rejected_clips.append(RejectedClip(source=str(source.path), start_s=clip.start, end_s=clip.end,
                                                      reason=clip.rejection[0], detail=clip.rejection[1],
                                                      text=clip.text))
            continue
        number += 1
        made += 1
        name = f"wavs/clip_{number:06d}.wav"
        audio = read_range(source, clip.start, clip.end)
        pcm, rate = to_pcm16(audio), source.sample_rate
        _write_wav(out_dir / name, pcm, rate)
        fields = [name, _clean(clip.text), speaker, "machine" if clip.machine else "given"]
        rows.append("|".join(fields[:len(columns)] + [""] * (len(columns) - len(fields))))
        segments.append("\t".join([name, str(source.path), f"{clip.start:.3f}", f"{clip.end:.3f}",
                                   f"{clip.score:.4f}", clip.method]))
        per_file[clip.file]["clips"] += 1
        per_file[clip.file]["hours_kept"] += clip.duration / 3600
        kept_s += clip.duration
    for f in per_file:
        f["hours_kept"] = round(f["hours_kept"], 4)
    report.clips, report.rejected, report.sources = made, dict(reasons), per_file
    report.hours = round(kept_s / 3600, 4)
    report.source_hours = round(sum(s.duration_s for s in sources) / 3600, 4)
    report.machine_transcripts = any(c.machine for c in clips)
    _append_lines(out_dir / "metadata.csv", "|".join(columns), rows)
    _append_lines(out_dir / "segments.tsv", "\t".join(SEGMENTS_HEADER), segments)
    if adding:
        _keep_earlier_report(out_dir)
    atomic_write(out_dir / "ingest_report.json", json.dumps(report.__dict__, indent=2, ensure_ascii=False))
    atomic_write(out_dir / "ingest_report.md", report.markdown())
    return report


def _write_wav(path: Path, pcm: npt.NDArray[np.int16], rate: int) -> None:
    atomic_write(path, lambda f: sf.write(f, pcm, rate, subtype="PCM_16", format="WAV"))


def _append_lines(path: Path, header: str, lines: list[str]) -> None:
    """``path`` with ``lines`` after its existing rows (a new file gets ``header`` first); written atomically."""
    old = path.read_text(encoding="utf-8-sig").splitlines() if path.is_file() else [header]
    atomic_write(path, "\n".join(old + lines) + "\n")
