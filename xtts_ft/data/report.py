"""What data preparation did: the :class:`PrepareReport`, report.json / .txt / .png, and rejected.tsv."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from xtts_ft.data.reasons import REASONS, Rejection
from xtts_ft.figures import new_figure
from xtts_ft.tempfiles import atomic_write

MAX_EXAMPLES = 5  # per rejection reason, in report.json / report.txt


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
    examples: dict[str, list[dict]] = field(default_factory=dict)  # reason -> [{clip, where, detail}]
    speaker_detail: dict[str, dict] = field(default_factory=dict)  # speaker -> {kept, train, eval, hours}
    speakers_without_eval: list[str] = field(default_factory=list)
    duration_stats: dict[str, float] = field(default_factory=dict)  # seconds, kept clips
    chars_per_second_stats: dict[str, float] = field(default_factory=dict)  # kept clips
    transcript_cer_stats: dict[str, float] = field(default_factory=dict)  # every clip dataset.transcript_check heard
    seconds: float = 0.0  # wall-clock time of the run
    # several datasets in one run (data/multi.py): one dict each, {name, path, layout, language, total, kept,
    # kept_train, kept_eval, hours, rejected_total, rejected, folder}; empty for a single dataset
    datasets: list[dict] = field(default_factory=list)

    @property
    def rejected_total(self) -> int:
        return sum(self.rejected.values())

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
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
        for name, d in ranked[:10]:
            lines.append(f"  {name}: {d['kept']} clips ({d['train']} train, {d['eval']} eval, {d['hours']:.2f} h)")
        if len(ranked) > 10:
            lines.append(f"  ... and {len(ranked) - 10} more speaker(s), see report.json")
        if self.speakers_without_eval:
            lines.append(
                f"Note: {len(self.speakers_without_eval)} speaker(s) have no eval clip because of "
                "dataset.eval_max_clips: " + ", ".join(self.speakers_without_eval[:5])
            )
        return lines

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


def write_reports(
    report: PrepareReport,
    out_dir: Path,
    kept: tuple[list[float], list[float]],
    rejected: tuple[list[float], list[float]],
    bounds: Optional[dict[str, tuple[float, float]]] = None,
) -> None:
    """report.json, report.txt and report.png; kept/rejected are (durations, chars_per_second)."""
    atomic_write(out_dir / "report.json", json.dumps(report.to_dict(), ensure_ascii=False, indent=2) + "\n")
    text = report.summary_lines() + [""] + report.detail_lines()
    atomic_write(out_dir / "report.txt", "\n".join(text).rstrip("\n") + "\n")
    write_plot(out_dir / "report.png", kept, rejected, bounds or {})


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
