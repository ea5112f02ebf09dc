"""``<run_dir>/report.html``: one self-contained page to follow a run and pick a checkpoint.

It reads ``metrics.jsonl`` (training and eval lines) and ``samples/index.jsonl`` (the eval
hook's records) and writes plots as embedded PNG data URIs, a checkpoint table, and an
``<audio>`` player per sample and step. Audio is linked by relative paths, so the page keeps
working when the run directory is copied; it loads nothing from the network (no CDN, no fonts).
Missing keys and unreadable lines are tolerated; skipped lines are counted on the page.
"""

from __future__ import annotations

import html
import logging
import math
import time
from pathlib import Path
from typing import Mapping, Optional, Sequence
from urllib.parse import quote

from xtts_ft.checkpoint_store import CheckpointStore
from xtts_ft.evaluate.cer_floor import read_cer_floor
from xtts_ft.evaluate.intelligibility import LENGTH_BUCKETS
from xtts_ft.evaluate.listening import LISTENING_NOTE
from xtts_ft.evaluate.plots import PlotSpec, clean_series, plot_data_uri
from xtts_ft.json_types import JsonMapping, JsonValue
from xtts_ft.layout import RunLayout
from xtts_ft.run_history import EvalRecord, MetricsRow, latest_by_step, read_evaluations, read_events, read_metrics
from xtts_ft.tempfiles import atomic_write
from xtts_ft.train.dvae_stage import dvae_summary

log = logging.getLogger(__name__)

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans Ethiopic",sans-serif;margin:24px;color:#222}
h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd}h3{font-size:15px}
table{border-collapse:collapse;font-size:13px;margin:8px 0}td,th{border:1px solid #ddd;padding:4px 8px;text-align:left}
th{background:#f4f4f4}.best{font-weight:bold;background:#eef8ee}.bad{color:#b00}.muted{color:#777}.heard{font-size:90%;color:#345;margin-top:2px}
.plots{display:grid;grid-template-columns:repeat(auto-fill,minmax(380px,1fr));gap:12px}
.plots figure{margin:0}.plots img{width:100%;height:auto;border:1px solid #eee}
audio{height:32px;width:260px}td.text{max-width:420px}
"""


def _points(rows: Sequence[JsonMapping], key: str) -> list[tuple[JsonValue, JsonValue]]:
    return [(r["step"], r.get(key)) for r in rows if key in r]


def _fmt(value: object, digits: int = 3) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)) and math.isfinite(value):
        return f"{value:.{digits}g}"
    return html.escape(str(value))


def _src(path: str) -> str:
    return html.escape(quote(path, safe="/"), quote=True)


def _figure(title: str, uri: Optional[str]) -> str:
    if uri is None:
        return ""
    return f'<figure><img alt="{html.escape(title)}" src="{uri}"></figure>'


_CER_BUCKETS = {f"sample_cer_{name}" for name in LENGTH_BUCKETS}  # per text length, not per language


def _training_plots(train: list[MetricsRow], evals: list[MetricsRow]) -> list[str]:
    loss = PlotSpec("Loss", "loss", [
        clean_series("train loss", _points(train, "loss")),
        clean_series("text CE", _points(train, "loss_text_ce")),
        clean_series("mel CE", _points(train, "loss_mel_ce")),
        clean_series("eval loss", _points(evals, "eval_loss"), "points"),
    ])
    language_cers = sorted({k for r in evals for k in r if k.startswith("sample_cer_")} - _CER_BUCKETS)
    specs = [
        loss,
        PlotSpec("Eval loss", "loss", [
            clean_series("eval loss", _points(evals, "eval_loss"), "points"),
            clean_series("eval mel CE", _points(evals, "eval_loss_mel_ce"), "points"),
        ]),
        PlotSpec("Eval loss per language (a rising base language: forgetting)", "loss", [
            clean_series(f"eval loss {key.removeprefix('eval_loss_')}", _points(evals, key), "points")
            for key in sorted({k for r in evals for k in r if k.startswith("eval_loss_")} - {"eval_loss_text_ce",
                                                                                            "eval_loss_mel_ce"})
        ]),
        PlotSpec("Sample CER per language (the run's other languages heard by their own recognisers)", "CER", [
            clean_series("CER run language" if key == "sample_cer" else f"CER {key.removeprefix('sample_cer_')}",
                         _points(evals, key), "points")
            for key in (["sample_cer", *language_cers] if language_cers else [])
        ]),
        PlotSpec("Learning rate", "lr", [clean_series("lr", _points(train, "lr"))]),
        PlotSpec("Gradient norm (before clipping)", "norm", [clean_series("grad norm", _points(train, "grad_norm"))]),
        PlotSpec("Loss scale (fp16)", "scale", [clean_series("loss scale", _points(train, "loss_scale"))], logy=True),
        PlotSpec("Skipped steps (non-finite)", "steps", [clean_series("skipped", _points(train, "skipped_steps"))]),
    ]
    return [_figure(s.title, plot_data_uri(s)) for s in specs]


def _sample_plots(index: list[EvalRecord]) -> list[str]:
    rows = [dict(r.metrics, step=r.step) for r in index]
    spc_range = next((r.seconds_per_char_range for r in reversed(index) if r.seconds_per_char_range), None)
    specs = [
        PlotSpec("Generation ended with the stop token", "share", [
            clean_series("test sentences", _points(rows, "sample_stop_rate"), "points"),
            clean_series("MCD clips", _points(rows, "mcd_stop_rate"), "points"),
        ]),
        PlotSpec("Character error rate of the recognised samples (lower is better)", "CER", [
            clean_series("all sentences", _points(rows, "sample_cer"), "points"),
            clean_series("short texts", _points(rows, "sample_cer_short"), "points"),
            clean_series("long texts", _points(rows, "sample_cer_long"), "points"),
        ]),
        PlotSpec("Speaker similarity to the reference (higher is better)", "cosine", [
            clean_series("samples", _points(rows, "sample_speaker_similarity"), "points"),
        ]),
        PlotSpec("Samples that kept talking after their text (lower is better)", "share", [
            clean_series("short texts", _points(rows, "sample_tail_rate_short"), "points"),
            clean_series("all sentences", _points(rows, "sample_tail_rate"), "points"),
        ]),
        PlotSpec("Predicted quality (DNSMOS): samples against the recordings", "MOS", [
            clean_series("samples", _points(rows, "sample_quality_mos"), "points"),
            clean_series("real eval clips", _points(rows, "reference_quality_mos"), "points"),
        ]),
        PlotSpec("MCD against the recordings (lower is better)", "dB", [clean_series("MCD", _points(rows, "mcd"), "points")]),
        PlotSpec("Silence ratio (frames below -40 dBFS)", "share", [
            clean_series("silence", _points(rows, "sample_silence_ratio"), "points"),
        ]),
        PlotSpec("Seconds per character", "s/char", [
            clean_series("samples", _points(rows, "sample_seconds_per_char"), "points"),
        ], band=spc_range, band_label="training data"),
        PlotSpec("Real-time factor (synthesis time / audio time)", "RTF", [
            clean_series("RTF", _points(rows, "sample_rtf"), "points"),
        ]),
    ]
    return [_figure(s.title, plot_data_uri(s)) for s in specs]


def _checkpoints(run_dir: Path) -> dict[int, str]:
    """Step -> the link (relative to the run folder) of every checkpoint folder the run holds."""
    return {step: f"{folder.relative_to(run_dir).as_posix()}/"
            for step, folder in CheckpointStore.of_run(run_dir).step_folders().items()}


def _best_step(values: dict[int, Optional[float]]) -> Optional[int]:
    finite = {s: v for s, v in values.items() if v is not None and math.isfinite(v)}
    return min(finite, key=lambda step: finite[step]) if finite else None


def _cer_cell(cer: Optional[float], floor: Optional[JsonMapping]) -> str:
    """A sample CER, with the recogniser's floor beside it when the run measured one."""
    if cer is None or floor is None:
        return _fmt(cer)
    return f"{_fmt(cer, 2)} against a floor of {_fmt(floor['cer_floor'], 2)}"


def _quality_cell(m: Mapping[str, Optional[float]]) -> str:
    """The samples' predicted quality against the recordings' (and the difference), as far as measured."""
    sample, reference = m.get("sample_quality_mos"), m.get("reference_quality_mos")
    if sample is None:
        return _fmt(None)
    if reference is None:
        return _fmt(sample, 2)
    return f"{_fmt(sample, 2)} / {_fmt(reference, 2)} ({sample - reference:+.2f})"


def _checkpoint_table(run_dir: Path, evals: list[MetricsRow], index: list[EvalRecord]) -> str:
    eval_loss = {r.step: r.number("eval_loss") for r in evals}
    sample_metrics = {r.step: r.metrics for r in index}
    mcd = {s: m.get("mcd") for s, m in sample_metrics.items()}
    ckpts = _checkpoints(run_dir)
    steps = sorted(set(eval_loss) | set(sample_metrics) | set(ckpts))
    if not steps:
        return '<p class="muted">No evaluations or checkpoints yet.</p>'
    floor = read_cer_floor(run_dir)
    best_loss, best_mcd = _best_step(eval_loss), _best_step(mcd)
    # short texts first: where fine-tunes babble and miss the stop token (issue 24)
    out = []
    if floor is not None:
        out.append(f'<p>CER floor {_fmt(floor["cer_floor"], 2)}: the recogniser\'s own CER on '
                   f'{floor.get("clips", "?")} real eval recordings. A sample is not heard better than the real '
                   f"voice, so a CER near the floor is as good as this recogniser can tell.</p>")
    if any("sample_quality_mos" in m or "sample_tail_rate" in m for m in sample_metrics.values()):
        out.append(f"<p>{html.escape(LISTENING_NOTE)}</p>")
    out.append("<table><tr><th>step</th><th>short-text CER</th><th>short-text stop rate</th>"
               "<th>short-text tail rate</th><th>CER</th><th>stop rate</th><th>tail rate</th>"
               "<th>predicted quality (samples / recordings)</th><th>eval loss</th><th>MCD (dB)</th>"
               "<th>silence ratio</th><th>checkpoint</th></tr>")
    for s in steps:
        m = sample_metrics.get(s, {})
        cls = ' class="best"' if s in (best_loss, best_mcd) else ""
        marks = ", ".join(x for x, b in (("lowest eval loss", best_loss), ("lowest MCD", best_mcd)) if b == s)
        ck = f'<a href="{_src(ckpts[s])}">{html.escape(ckpts[s])}</a>' if s in ckpts else '<span class="muted">—</span>'
        out.append(
            f"<tr{cls}><td>{s}{(' (' + marks + ')') if marks else ''}</td>"
            f"<td>{_fmt(m.get('sample_cer_short'))}</td><td>{_fmt(m.get('sample_stop_rate_short'))}</td>"
            f"<td>{_fmt(m.get('sample_tail_rate_short'))}</td>"
            f"<td>{_cer_cell(m.get('sample_cer'), floor)}</td><td>{_fmt(m.get('sample_stop_rate'))}</td>"
            f"<td>{_fmt(m.get('sample_tail_rate'))}</td><td>{_quality_cell(m)}</td>"
            f"<td>{_fmt(eval_loss.get(s), 4)}</td><td>{_fmt(mcd.get(s))}</td>"
            f"<td>{_fmt(m.get('sample_silence_ratio'))}</td><td>{ck}</td></tr>"
        )
    out.append("</table>")
    return "\n".join(out)


def _audio(run_dir: Path, path: Optional[str]) -> str:
    """An <audio> player with a src relative to the report, or a note when the file is elsewhere."""
    if not path:
        return '<span class="muted">—</span>'
    p = Path(path)
    if p.is_absolute():
        try:
            p = p.resolve().relative_to(run_dir.resolve())
        except ValueError:
            return f'<span class="muted" title="{html.escape(path)}">outside the run dir</span>'
    return f'<audio controls preload="metadata" src="{_src(p.as_posix())}"></audio>'


def _heard(sample: JsonMapping) -> str:
    """The recognised text under the player, when the evaluation transcribed the sample."""
    text = sample.get("recognized_text")
    if text is None:
        return ""
    return f'<div class="heard">heard: {html.escape(text) if text else "<i>(nothing)</i>"}</div>'


def _sample_rows(run_dir: Path, samples: Sequence[JsonMapping], with_reference: bool) -> str:
    head = "<tr><th>voice</th><th>text</th><th>sample</th>"
    head += "<th>recording</th><th>MCD</th>" if with_reference else ""
    head += "<th>CER</th><th>similarity</th><th>tail (s)</th><th>quality</th>" if not with_reference else ""
    head += "<th>duration (s)</th><th>ended</th><th>s/char</th><th>silence</th><th>RTF</th></tr>"
    rows = [head]
    for s in samples:
        stop = s.get("ended_with_stop")
        ended = "stop token" if stop else (f'<span class="bad">length limit ({s.get("n_codes")} codes)</span>'
                                           if stop is not None else "—")
        spc_ok = s.get("seconds_per_char_in_range")
        spc = _fmt(s.get("seconds_per_char")) + (' <span class="bad">(out of range)</span>' if spc_ok is False else "")
        row = (f"<tr><td>{html.escape(str(s.get('speaker', '')))}</td>"
               f"<td class=\"text\" title=\"{html.escape(str(s.get('normalized_text', '')))}\">"
               f"{html.escape(str(s.get('text', '')))}</td><td>{_audio(run_dir, s.get('path'))}{_heard(s)}</td>")
        if with_reference:
            row += f"<td>{_audio(run_dir, s.get('reference_wav'))}</td><td>{_fmt(s.get('mcd'))}</td>"
        else:
            row += (f"<td>{_fmt(s.get('cer'))}</td><td>{_fmt(s.get('speaker_similarity'))}</td>"
                    f"<td>{_fmt(s.get('tail_s'))}</td><td>{_fmt(s.get('quality_mos'))}</td>")
        row += (f"<td>{_fmt(s.get('duration_s'))}</td><td>{ended}</td><td>{spc}</td>"
                f"<td>{_fmt(s.get('silence_ratio'))}</td><td>{_fmt(s.get('rtf'))}</td></tr>")
        rows.append(row)
    return "<table>" + "\n".join(rows) + "</table>"


def _sample_sections(run_dir: Path, index: list[EvalRecord]) -> str:
    if not index:
        return '<p class="muted">No samples yet (they are written at each evaluation).</p>'
    parts = []
    for i, rec in enumerate(reversed(index)):
        metrics = ", ".join(f"{k} {_fmt(v)}" for k, v in rec.metrics.items())
        parts.append(f'<details{" open" if i == 0 else ""}><summary><b>step {rec.step}</b> '
                     f'<span class="muted">{html.escape(metrics)}</span></summary>')
        if rec.samples:
            parts.append(_sample_rows(run_dir, rec.samples, with_reference=False))
        if rec.mcd_samples:
            parts.append("<h3>Eval clips (own text, own recording as the voice)</h3>")
            parts.append(_sample_rows(run_dir, rec.mcd_samples, with_reference=True))
        parts.append("</details>")
    return "\n".join(parts)


def _training_banners(run_dir: Path) -> list[str]:
    """What the training loop found about the run as a whole (events.jsonl): overfitting, an early stop."""
    out = []
    for e in read_events(run_dir):
        if e.event == "overfitting":
            out.append(f"Overfitting: {e.get('metric')} has been worse than its best (step {e.get('best_step')}) for "
                       f"{e.get('evals_worse')} evaluations by step {e.get('at_step')} while the training loss fell "
                       f"({_fmt(e.get('train_loss_from'), 4)} -> {_fmt(e.get('train_loss_to'), 4)}). The best "
                       f"checkpoint is step {e.get('best_step')}.")
        elif e.event == "early_stop":
            kept = f" (the best checkpoint kept: {Path(str(e['best_checkpoint'])).name})" if e.get("best_checkpoint") else ""
            out.append(f"Stopped early at step {e.get('step')}: {e.get('metric')} did not improve for "
                       f"{e.get('patience')} evaluations; the best was step {e.get('best_step')}{kept}.")
    return out


def render_report(run_dir: Path) -> str:

    """The report page for ``run_dir`` as an HTML string."""
    run_dir = Path(run_dir)
    metrics, evaluations = read_metrics(run_dir), read_evaluations(run_dir)
    train = list(latest_by_step(r for r in metrics if r.split == "train").values())
    evals = list(latest_by_step(r for r in metrics if r.split == "eval").values())
    index = list(latest_by_step(evaluations).values())
    notes = []
    if metrics.skipped or evaluations.skipped:
        notes.append(f"Skipped unreadable lines: {len(metrics.skipped)} in metrics.jsonl, {len(evaluations.skipped)} "
                     "in samples/index.jsonl.")
    if not metrics:
        notes.append("No metrics.jsonl lines yet.")
    last = train[-1] if train else {}
    summary = (f"last step {last.get('step', '—')}, train loss {_fmt(last.get('loss'), 4)}; "
               f"{len(evals)} evaluations, {len(index)} sample sets")
    plots = [p for p in _training_plots(train, evals) + _sample_plots(index) if p]
    body = [
        f"<h1>XTTS fine-tune report: {html.escape(run_dir.resolve().name)}</h1>",
        f'<p class="muted">Generated {time.strftime("%Y-%m-%d %H:%M:%S")}. {html.escape(summary)}</p>',
        *(f'<p class="bad">{html.escape(n)}</p>' for n in notes),
        *(f'<p class="bad banner">{html.escape(n)}</p>' for n in _training_banners(run_dir)),
        *([f"<p>{html.escape(dvae_line)}</p>"] if (dvae_line := dvae_summary(run_dir)) else []),
        "<h2>Pick a checkpoint</h2>",
        "<p>Short texts come first: they are where fine-tunes babble and miss the stop token. Lower CER, eval "
        "loss and MCD are better; a stop rate below 1 means some samples ran to the length limit instead of "
        "ending. Listen before you choose.</p>",
        _checkpoint_table(run_dir, evals, index),
        "<h2>Curves</h2>",
        '<div class="plots">' + "\n".join(plots) + "</div>" if plots else '<p class="muted">Nothing to plot yet.</p>',
        "<h2>Samples</h2>",
        _sample_sections(run_dir, index),
    ]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>XTTS report {html.escape(run_dir.resolve().name)}</title><style>{_CSS}</style></head>\n<body>\n"
            + "\n".join(body) + "\n</body></html>\n")


def write_report(run_dir: Path) -> Path:
    """Write ``<run_dir>/report.html`` (atomically) and return its path."""
    run_dir = Path(run_dir)
    out: Path = RunLayout(run_dir).report
    atomic_write(out, render_report(run_dir))
    log.info("report written to %s", out)
    return out
