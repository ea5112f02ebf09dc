"""What the app shows about a run, read from the run folder only (knows nothing of Gradio).

Curves come from ``metrics.jsonl`` (train and eval lines), evaluations and their samples from
``samples/index.jsonl``, checkpoints and "best" from the checkpoint folders through the trainer's own
rule (:meth:`xtts_ft.checkpoint_store.CheckpointStore.best`). Nothing here is cached between calls: each refresh
reads the files again, so the page can never disagree with what ``headless_train.py`` wrote.
"""

from __future__ import annotations

import html
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

import yaml

from xtts_ft.checkpoint_store import CheckpointStore
from xtts_ft.errors import UserError
from xtts_ft.evaluate.listening import LISTENING_NOTE
from xtts_ft.figures import new_figure
from xtts_ft.json_types import JsonObject
from xtts_ft.layout import RunLayout, step_of
from xtts_ft.model_folder import is_export
from xtts_ft.run_folder import read_record
from xtts_ft.run_history import EvalRecord, latest_by_step, read_evaluations, read_metrics

# (metrics.jsonl key, title, which lines carry it)
CURVES = (
    ("loss", "loss", "train"),
    ("eval_loss", "eval loss", "eval"),
    ("sample_cer", "CER of the samples", "eval"),
    ("sample_speaker_similarity", "speaker similarity", "eval"),
    ("lr", "learning rate", "train"),
    ("skipped_steps", "skipped steps", "train"),
)


MAX_PLOTTED = 400  # markers per curve at most


def run_config(run_dir: Path) -> JsonObject:
    """The run's resolved config.yaml as plain data ({} before the run wrote it)."""
    path = RunLayout(run_dir).config
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8")) or {} if path.is_file() else {}
    except yaml.YAMLError:
        return {}


def curve_points(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """(step, value) per curve, from metrics.jsonl."""
    series: dict[str, list[tuple[int, float]]] = {key: [] for key, _, _ in CURVES}
    for record in read_metrics(run_dir):
        split = "eval" if record.is_eval else "train"
        for key, _, kind in CURVES:
            value = record.get(key)
            if kind == split and isinstance(value, (int, float)):
                series[key].append((record.step, float(value)))
    return series


def curves_svg(run_dir: Path) -> str:
    """Every curve as one inline SVG (matplotlib); each curve's points are markers inside ``<g id="curve-KEY">``."""
    series = curve_points(run_dir)
    fig = new_figure((10, 5.2))
    axes = fig.subplots(2, 3)
    for ax, (key, title, _) in zip(axes.flat, CURVES):
        points = series[key]
        if points:
            stride = -(-len(points) // MAX_PLOTTED)  # a long run: every n-th point (and the last) keeps the page light
            shown = points[::stride] + ([points[-1]] if (len(points) - 1) % stride else [])
            steps, values = zip(*shown)
            ax.plot(steps, values, marker="o", markersize=3, gid=f"curve-{key}")
        else:
            ax.text(0.5, 0.5, "no points yet", ha="center", va="center", transform=ax.transAxes, color="gray")
        ax.set_title(f"{title} ({len(points)})", fontsize=9)
        ax.tick_params(labelsize=7)
        ax.ticklabel_format(axis="y", useOffset=False)  # a nearly flat learning rate reads as its value, not 1e-9+...
    fig.tight_layout()
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    svg = buf.getvalue()
    return svg[svg.find("<svg"):]  # drop the XML prologue: the SVG sits inside the page


@dataclass
class Progress:
    step: int
    max_steps: Optional[int]
    eta_s: Optional[float]
    loss: Optional[float]

    def line(self) -> str:
        if self.step == 0 and self.loss is None:
            return "no training step logged yet"
        total = f"/{self.max_steps}" if self.max_steps else ""
        eta = f", ETA {int(self.eta_s // 60)} min {int(self.eta_s % 60)} s" if self.eta_s is not None else ""
        loss = f", loss {self.loss:.4f}" if self.loss is not None else ""
        return f"step {self.step}{total}{loss}{eta}"


def progress(run_dir: Path) -> Progress:
    train = [r for r in read_metrics(run_dir) if not r.is_eval and "loss" in r]
    max_steps = (run_config(run_dir).get("training") or {}).get("max_steps")
    if not train:
        return Progress(0, max_steps, None, None)
    last = train[-1]
    return Progress(last.step, max_steps, last.number("eta_s"), last.number("loss"))


# --- evaluations, samples, checkpoints -----------------------------------------------------------------
def evaluations(run_dir: Path) -> dict[int, EvalRecord]:
    """step -> the latest evaluation of that step, by step (a resumed run may evaluate a step again)."""
    return latest_by_step(read_evaluations(run_dir))


def checkpoints(run_dir: Path) -> list[Path]:
    """Every checkpoint folder of the run directory, oldest first (not verified: a damaged one is still listed)."""
    return [c.folder for c in CheckpointStore.of_run(run_dir).list()]


def best_step(run_dir: Path) -> Optional[int]:
    """The step of the run's best checkpoint, by the run's checkpoint.best_metric (the trainer's own rule)."""
    metric = (run_config(run_dir).get("checkpoint") or {}).get("best_metric", "eval_loss")
    try:
        record = read_record(run_dir)
    except UserError:  # a damaged run.json: every checkpoint counts (the page still says what the files hold)
        record = None
    best = CheckpointStore.of_run(run_dir, record.owns if record is not None else None).best(metric)
    return step_of(best.name) if best is not None else None


def exports(run_dir: Path) -> list[Path]:
    folder = RunLayout(run_dir).exports
    return sorted(p for p in folder.iterdir() if is_export(p)) if folder.is_dir() else []


def file_url(path: Path) -> str:
    """A URL Gradio serves the file at; relative, so it also works behind a proxy path (root_path)."""
    return "gradio_api/file=" + html.escape(str(Path(path).resolve()), quote=True)


def _fmt(value: object, digits: int = 3) -> str:
    return f"{value:.{digits}f}" if isinstance(value, (int, float)) else "-"


def samples_table(run_dir: Path, step: int) -> str:
    """One evaluation's samples: text, what the recogniser heard, CER, similarity, and the audio."""
    record = evaluations(run_dir).get(step)
    if record is None:
        return "<p>No samples for this step.</p>"
    rows = []
    for s in record.samples:
        audio = Path(run_dir) / s["path"]
        rows.append(
            f"<tr><td>{html.escape(str(s.get('speaker')))}</td><td>{html.escape(str(s.get('text')))}</td>"
            f"<td>{html.escape(str(s.get('recognized_text') or '-'))}</td><td>{_fmt(s.get('cer'))}</td>"
            f"<td>{_fmt(s.get('speaker_similarity'))}</td><td>{'yes' if s.get('ended_with_stop') else 'no'}</td>"
            f"<td>{_fmt(s.get('tail_s'), 2)}</td><td>{_fmt(s.get('quality_mos'), 2)}</td>"
            f"<td><audio controls preload=\"auto\" src=\"{file_url(audio)}\"></audio></td></tr>"
        )
    metrics = record.metrics
    head = (f"<p>step {step}: mean CER {_fmt(metrics.get('sample_cer'))}, speaker similarity "
            f"{_fmt(metrics.get('sample_speaker_similarity'))}, {len(rows)} samples</p>") + _listening_line(metrics)
    return (head + "<table class='samples'><tr><th>voice</th><th>text</th><th>heard</th><th>CER</th>"
            "<th>similarity</th><th>stopped</th><th>tail (s)</th><th>quality</th><th>audio</th></tr>"
            + "".join(rows) + "</table>")


def _listening_line(metrics: Mapping[str, Optional[float]]) -> str:
    """The evaluation's predicted quality against the recordings' and its tail rate, with what they mean."""
    sample, reference, tail = (metrics.get(k) for k in ("sample_quality_mos", "reference_quality_mos",
                                                         "sample_tail_rate"))
    if sample is None and tail is None:
        return ""
    parts = []
    if sample is not None:
        against = (f" against {_fmt(reference, 2)} for your recordings ({sample - reference:+.2f})"
                   if reference is not None else "")
        parts.append(f"predicted quality {_fmt(sample, 2)}{against}")
    if tail is not None:
        parts.append(f"tail rate {_fmt(tail, 2)} (short texts {_fmt(metrics.get('sample_tail_rate_short'), 2)})")
    return (f"<p class='listening'>{html.escape(', '.join(parts))}.</p>"
            f"<p class='listening-note'>{html.escape(LISTENING_NOTE)}</p>")


def sample_names(run_dir: Path, step: int) -> list[tuple[str, str]]:
    """(label, sample name) for each sample of an evaluation: the same name is the same sentence and voice."""
    record = evaluations(run_dir).get(step)
    return [(f"{s.get('index')}: {str(s.get('text'))[:40]} ({s.get('speaker')})", s["name"])
            for s in (record.samples if record is not None else ())]


def sample_player(run_dir: Path, step: Optional[int], name: Optional[str], best: Optional[int]) -> str:
    """One checkpoint's sample of one sentence and voice, with its scores; the best checkpoint is marked."""
    record = evaluations(run_dir).get(step) if step is not None else None
    sample = next((s for s in (record.samples if record is not None else ()) if s.get("name") == name), None)
    if sample is None:
        return "<p>-</p>"
    mark = " <b class='best'>&#9733; best</b>" if step == best else ""
    return (f"<div class='side' data-step='{step}'><p>step {step}{mark}</p>"
            f"<p>heard: {html.escape(str(sample.get('recognized_text') or '-'))}</p>"
            f"<p>CER {_fmt(sample.get('cer'))}, similarity {_fmt(sample.get('speaker_similarity'))}</p>"
            f"<audio controls preload=\"auto\" src=\"{file_url(Path(run_dir) / sample['path'])}\"></audio></div>")
