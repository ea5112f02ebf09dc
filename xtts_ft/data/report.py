"""What data preparation did: the :class:`PrepareReport`, report.json / .txt / .png, and rejected.tsv."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, TypedDict, Union

import numpy as np

from xtts_ft.config import SHORT_TEXT_CHARS, is_short_text
from xtts_ft.data.reasons import REASONS, Rejection
from xtts_ft.figures import new_figure
from xtts_ft.json_types import JsonObject
from xtts_ft.layout import DATA_REPORT_PLOT, DATA_REPORT_TEXT, STAGE_REPORT
from xtts_ft.tempfiles import atomic_write

MAX_EXAMPLES = 5  # per rejection reason, in report.json / report.txt
# What counts as a short clip (issue 24): XTTS fine-tunes babble on one-word inputs when their data holds
# too few utterances this short, in time or in text (a short text: xtts_ft.config.is_short_text).
SHORT_CLIP_S = 2.0
PIECES_FILE = "short_clips.tsv"  # the short pieces made from training clips (data/derived.py), one per row
# Warn when more than this share of the clips whose SNR was estimated were rejected as noisy: a judgement (a few
# noisy clips are normal in found data; a tenth means the recordings themselves are the problem).
NOISY_WARN_SHARE = 0.1


def pieces_made(made: int, wanted: int, from_clips: int, tried: int) -> str:
    """How many pieces were made, said alike in the log and the report: from how many clips (those that gave at
    least one) and how many clips were tried (those that gave none among them)."""
    return f"{made} of {wanted} wanted, from {from_clips} training clip(s) ({tried} tried)"


# The shapes of the report's parts, as report.json holds them.
class RejectionExample(TypedDict):
    clip: str
    where: str
    detail: str


class SpeakerDetail(TypedDict):
    kept: int
    train: int
    eval: int
    hours: float


class ShortClipShare(TypedDict, total=False):
    """:func:`short_clip_share`; empty when no clip was kept (every key or none)."""

    clips: int
    under_2s: int
    under_2s_share: float
    short_text: int
    short_text_share: float
    min_share: float


class SnrSummary(TypedDict, total=False):
    """:func:`snr_summary`; empty before the audio stage ran. ``median``, ``worst_tenth``, ``min``: when measured."""

    measured: int
    unmeasured: int
    min_snr_db: Optional[float]
    noisy: int
    median: float
    worst_tenth: float
    min: float


class PieceRow(TypedDict):
    file: str  # relative to the prepared folder
    source: str  # clip id of the training clip it was cut from
    text: str


class ShortPieces(TypedDict, total=False):
    """What ``dataset.short_clips`` did (data/derived.py ``add_pieces``); empty when prepare did not get that far."""

    setting: Union[float, str]  # dataset.short_clips: a share, "auto" or "off"
    wanted: int
    why: str
    made: int
    from_clips: int
    clips_tried: int
    dropped: dict[str, int]  # reason -> candidates
    pieces: list[PieceRow]


class DatasetSummary(TypedDict):
    """One dataset of a run that mixes several (data/multi.py)."""

    name: str
    path: str
    layout: str
    language: str
    total: int
    kept: int
    kept_train: int
    kept_eval: int
    hours: float
    rejected_total: int
    rejected: dict[str, int]  # reasons with clips only
    folder: str


@dataclass
class PrepareReport:
    """Counts and statistics of one ``prepare_dataset`` run (every clip is kept or counted here)."""

    kept: int
    kept_train: int
    kept_eval: int
    rejected: dict[str, int]  # every reason key of REASONS, zeros included, in check order
    hours: float  # audio kept, after trimming
    speakers: dict[str, int]  # kept clips per speaker
    dataset: str = ""
    out_dir: str = ""
    layout: str = ""
    total: int = 0  # clips (entries) the dataset names
    processed: int = 0  # clips whose audio was decoded this run
    reused: int = 0  # clips whose previous result came from the cache
    examples: dict[str, list[RejectionExample]] = field(default_factory=dict)  # reason -> the first few
    speaker_detail: dict[str, SpeakerDetail] = field(default_factory=dict)
    speakers_without_eval: list[str] = field(default_factory=list)
    duration_stats: dict[str, float] = field(default_factory=dict)  # seconds, kept clips
    chars_per_second_stats: dict[str, float] = field(default_factory=dict)  # kept clips
    transcript_cer_stats: dict[str, float] = field(default_factory=dict)  # every clip dataset.transcript_check heard
    # kept clips under 2 s / with short texts: see short_clip_share
    short_clips: ShortClipShare = field(default_factory=ShortClipShare)
    # pieces made from training clips (dataset.short_clips, data/derived.py); counted in short_clips above
    short_pieces: ShortPieces = field(default_factory=ShortPieces)
    # the SNR estimates of the clips that passed the audio stage (kept and noisy alike): see snr_summary
    snr: SnrSummary = field(default_factory=SnrSummary)
    snr_values: list[float] = field(default_factory=list, repr=False)  # those estimates; not in report.json (multi.py)
    seconds: float = 0.0  # wall-clock time of the run
    # several datasets in one run (data/multi.py): one summary each; empty for a single dataset
    datasets: list[DatasetSummary] = field(default_factory=list)

    @property
    def rejected_total(self) -> int:
        return sum(self.rejected.values())

    def to_dict(self) -> JsonObject:
        d = dataclasses.asdict(self)
        d.pop("snr_values")
        d["rejected_total"] = self.rejected_total
        return d

    def top_reasons(self, n: int = 3) -> list[tuple[str, int]]:
        return sorted(((r, c) for r, c in self.rejected.items() if c), key=lambda rc: -rc[1])[:n]

    def summary_lines(self) -> list[str]:
        """A short readable summary (the CLI prints it; report.txt starts with it)."""
        lines = [
            f"Dataset {self.dataset} ({self.layout} layout) -> {self.out_dir}",
            f"Kept {self.kept} of {self.total} clips ({self.hours:.2f} h): {self.kept_train} train, "
            f"{self.kept_eval} eval; {len(self.speakers)} speaker(s)",
            f"Audio processed this run: {self.processed} clip(s); reused from the cache: {self.reused}",
        ]
        for name, stats, unit in (("Duration", self.duration_stats, " s"), ("Chars/s", self.chars_per_second_stats, ""),
                                  ("Transcript CER", self.transcript_cer_stats, "")):
            if stats.get("count"):
                lines.append(
                    f"{name}: min {stats['min']:g}{unit}, median {stats['median']:g}{unit}, "
                    f"mean {stats['mean']:g}{unit}, max {stats['max']:g}{unit}"
                )
        lines.extend(self.snr_lines())
        lines.extend(self.short_clip_lines())
        lines.extend(self.short_piece_lines())
        for d in self.datasets:
            lines.append(
                f"  dataset {d['name']} [{d['language']}] ({d['layout']}): kept {d['kept']} of {d['total']} "
                f"({d['kept_train']} train, {d['kept_eval']} eval, {d['hours']:.2f} h), rejected {d['rejected_total']}"
            )
        lines.append(f"Rejected {self.rejected_total} clip(s)" + (":" if self.rejected_total else ""))
        for reason, count in self.rejected.items():
            if count:
                lines.append(f"  {reason:<17}{count:>7}  {REASONS[reason]}")
        ranked = sorted(self.speaker_detail.items(), key=lambda kv: (-kv[1]["kept"], kv[0]))
        if ranked:
            lines.append(f"Speakers ({len(ranked)}):")
        for name, sd in ranked[:10]:
            lines.append(f"  {name}: {sd['kept']} clips ({sd['train']} train, {sd['eval']} eval, {sd['hours']:.2f} h)")
        if len(ranked) > 10:
            lines.append(f"  ... and {len(ranked) - 10} more speaker(s), see report.json")
        if self.speakers_without_eval:
            lines.append(
                f"Note: {len(self.speakers_without_eval)} speaker(s) have no eval clip because of "
                "dataset.eval_max_clips: " + ", ".join(self.speakers_without_eval[:5])
            )
        return lines

    def snr_lines(self) -> list[str]:
        """The SNR estimates' median and worst tenth, the noisy clips, and a warning when there are many."""
        s = self.snr
        if not s.get("measured"):
            return [f"SNR estimate: none ({s['unmeasured']} clip(s) without speech and pause to measure)"] \
                if s.get("unmeasured") else []
        check = (f"{s['noisy']} rejected as noisy (below dataset.min_snr_db {s['min_snr_db']:g} dB)"
                 if s["min_snr_db"] is not None else "the noisy check is off (dataset.min_snr_db: null)")
        lines = [f"SNR estimate of {s['measured']} clip(s): median {s['median']:g} dB, worst tenth below "
                 f"{s['worst_tenth']:g} dB, lowest {s['min']:g} dB; {check}"
                 + (f"; {s['unmeasured']} without an estimate (no speech or pause found)" if s["unmeasured"] else "")]
        warning = self.noisy_warning()
        if warning:
            lines.append(f"Warning: {warning}")
        return lines

    def noisy_warning(self) -> Optional[str]:
        """None unless more than NOISY_WARN_SHARE of the measured clips were rejected as noisy."""
        s = self.snr
        if not s.get("measured") or s["noisy"] <= NOISY_WARN_SHARE * s["measured"]:
            return None
        return (f"{s['noisy']} of {s['measured']} clips ({s['noisy'] / s['measured']:.0%}) are noisy (SNR estimate "
                f"below {s['min_snr_db']:g} dB): a fine-tune reproduces the hiss, hum or room of its recordings. "
                f"Listen to a few (rejected.tsv), denoise or re-record them, or lower dataset.min_snr_db to keep them")

    def short_clip_lines(self) -> list[str]:
        """The share of short clips, and a warning with the numbers when there are too few of them."""
        s = self.short_clips
        if not s.get("clips"):
            return []
        lines = [
            f"Short clips: {s['under_2s']} of {s['clips']} under {SHORT_CLIP_S:g} s ({s['under_2s_share']:.1%}), "
            f"{s['short_text']} under {SHORT_TEXT_CHARS} characters ({s['short_text_share']:.1%})"
        ]
        warning = self.short_clip_warning()
        if warning:
            lines.append(f"Warning: {warning}")
        return lines

    def short_piece_lines(self) -> list[str]:
        """What dataset.short_clips did: pieces made (how many, from how many clips, dropped and why) or why none."""
        s = self.short_pieces
        if not s:
            return []
        head = f"Short clips made from long ones (dataset.short_clips {s['setting']}):"
        if not s["made"]:
            return [f"{head} none ({s['why']})"]
        dropped = sum(s["dropped"].values())
        detail = ", ".join(f"{k} {v}" for k, v in s["dropped"].items())
        made = pieces_made(s["made"], s["wanted"], s["from_clips"], s.get("clips_tried", s["from_clips"]))
        line = f"{head} {made}, in metadata_train.csv and {PIECES_FILE}"
        return [line + (f"; dropped {dropped} ({detail})" if dropped else "")]

    def short_clip_warning(self) -> Optional[str]:
        """None when both shares reach dataset.short_clip_min_share; else what is missing, with the numbers."""
        s = self.short_clips
        if not s.get("clips"):
            return None
        low = [f"{share:.1%} of clips are under {what}" for share, what in
               ((s["under_2s_share"], f"{SHORT_CLIP_S:g} s"), (s["short_text_share"], f"{SHORT_TEXT_CHARS} characters"))
               if share < s["min_share"]]
        if not low:
            return None
        return (f"too few short clips for short inputs to work: {' and '.join(low)} (want at least "
                f"{s['min_share']:.0%}, dataset.short_clip_min_share); one-word or short texts may babble or run on. "
                f"Add short utterances (single words, short phrases, clips split at pauses)")

    def detail_lines(self) -> list[str]:
        """Examples of each rejection (report.txt)."""
        lines = []
        for reason, examples in self.examples.items():
            if examples:
                lines.append(f"{reason} ({self.rejected.get(reason, 0)}), e.g.:")
                lines.extend(f"  {e['clip']} [{e['where']}]: {e['detail']}" for e in examples)
        return lines


def stats(values: list[float]) -> dict[str, float]:
    if not values:
        return {"count": 0}
    a = np.asarray(values, dtype=np.float64)
    q = np.percentile(a, [5, 50, 95])
    return {
        "count": int(a.size),
        "min": round(float(a.min()), 2),
        "p5": round(float(q[0]), 2),
        "median": round(float(q[1]), 2),
        "mean": round(float(a.mean()), 2),
        "p95": round(float(q[2]), 2),
        "max": round(float(a.max()), 2),
        "total": round(float(a.sum()), 2),
    }


def snr_summary(values: list[float], unmeasured: int, min_snr_db: Optional[float], noisy: int) -> SnrSummary:
    """The report's ``snr``: how many clips were measured (and how many gave no estimate), the median, the worst
    tenth (10th percentile), the lowest, the threshold and the clips rejected as noisy."""
    out = SnrSummary(measured=len(values), unmeasured=unmeasured, min_snr_db=min_snr_db, noisy=noisy)
    if values:
        a = np.asarray(values, dtype=np.float64)
        out["median"] = round(float(np.median(a)), 1)
        out["worst_tenth"] = round(float(np.percentile(a, 10)), 1)
        out["min"] = round(float(a.min()), 1)
    return out


def short_clip_share(durations: list[float], texts: list[str], min_share: float) -> ShortClipShare:
    """Counts and shares of kept clips under SHORT_CLIP_S seconds and with a short text (``is_short_text``)."""
    n = len(durations)
    short_s = sum(1 for d in durations if d < SHORT_CLIP_S)
    short_c = sum(1 for t in texts if is_short_text(t))
    return {
        "clips": n,
        "under_2s": short_s,
        "under_2s_share": round(short_s / n, 4) if n else 0.0,
        "short_text": short_c,
        "short_text_share": round(short_c / n, 4) if n else 0.0,
        "min_share": min_share,
    }


def combine_short_clips(parts: list[ShortClipShare]) -> ShortClipShare:
    """Several datasets' short_clip_share dicts as one (counts summed; the strictest min_share)."""
    parts = [p for p in parts if p.get("clips")]
    if not parts:
        return {}
    n = sum(p["clips"] for p in parts)
    under_2s = sum(p["under_2s"] for p in parts)
    short_text = sum(p["short_text"] for p in parts)
    return ShortClipShare(clips=n, under_2s=under_2s, under_2s_share=round(under_2s / n, 4), short_text=short_text,
                          short_text_share=round(short_text / n, 4), min_share=max(p["min_share"] for p in parts))


def write_reports(
    report: PrepareReport,
    out_dir: Path,
    kept: tuple[list[float], list[float]],
    rejected: tuple[list[float], list[float]],
    bounds: Optional[dict[str, tuple[float, float]]] = None,
) -> None:
    """report.json, report.txt and report.png; kept/rejected are (durations, chars_per_second)."""
    atomic_write(out_dir / STAGE_REPORT, json.dumps(report.to_dict(), ensure_ascii=False, indent=2) + "\n")
    text = report.summary_lines() + [""] + report.detail_lines()
    atomic_write(out_dir / DATA_REPORT_TEXT, "\n".join(text).rstrip("\n") + "\n")
    write_plot(out_dir / DATA_REPORT_PLOT, kept, rejected, bounds or {})


def write_rejections(path: Path, rejections: list[Rejection]) -> None:
    """Every rejected clip, one per line: clip_id, reason, where, detail (tab-separated, header row)."""
    def clean(value: str) -> str:
        return " ".join(str(value).split())

    rows = ["clip_id\treason\twhere\tdetail"]
    rows += [
        "\t".join(clean(v) for v in (r.clip_id, r.reason, r.where, r.detail))
        for r in sorted(rejections, key=lambda r: (r.clip_id, r.where))
    ]
    atomic_write(path, "\n".join(rows) + "\n")


def write_plot(
    path: Path,
    kept: tuple[list[float], list[float]],
    rejected: tuple[list[float], list[float]],
    bounds: dict[str, tuple[float, float]],
) -> None:
    """Histograms of duration and chars/s, kept vs rejected, with the config limits marked."""
    fig = new_figure((11, 4))
    axes = fig.subplots(1, 2)
    fig.subplots_adjust(left=0.06, right=0.98, bottom=0.12, top=0.92, wspace=0.18)
    panels = (("duration", "Duration after trimming (s)"), ("chars_per_second", "Characters per second"))
    for i, (ax, (key, title)) in enumerate(zip(axes, panels)):
        series = [(kept[i], "kept", "tab:blue"), (rejected[i], "rejected", "tab:red")]
        series = [s for s in series if len(s[0])]
        if series:
            finite = np.concatenate([np.asarray(s[0], dtype=float) for s in series])
            finite = finite[np.isfinite(finite)]
            edges = np.histogram_bin_edges(finite, bins=40) if finite.size else 10
            for values, label, color in series:  # one filled outline per series: cheap to draw
                ax.hist(values, bins=edges, histtype="stepfilled", alpha=0.6, label=label, color=color)
            ax.legend()
        for limit in bounds.get(key, ()):
            ax.axvline(limit, color="black", linestyle="--", linewidth=1)
        ax.set_title(title)
        ax.set_ylabel("clips")
    atomic_write(path, lambda f: fig.savefig(f, dpi=90, format="png"))
