"""Small line plots rendered to PNG data URIs for the self-contained HTML report.

matplotlib is used through ``matplotlib.figure.Figure`` and the Agg canvas directly: no pyplot,
so no global figure state and no backend selection. PNGs carry no "Software" text chunk.
"""

from __future__ import annotations

import base64
import io
import math
from dataclasses import dataclass, field
from typing import Optional, Sequence

from xtts_ft.figures import integer_locator, new_figure

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b")


@dataclass
class Series:
    label: str
    xs: list[float]
    ys: list[float]
    style: str = "line"  # "line" or "points" (eval values are sparse: markers joined by a line)


@dataclass
class PlotSpec:
    title: str
    ylabel: str
    series: list[Series] = field(default_factory=list)
    logy: bool = False
    band: Optional[tuple[float, float]] = None  # a shaded y-range, e.g. the training data's range
    band_label: str = ""


def clean_series(label: str, points: Sequence[tuple[float, Optional[float]]], style: str = "line") -> Optional[Series]:
    """Drop missing and non-finite values; None when nothing is left."""
    xs, ys = [], []
    for x, y in points:
        if x is None or y is None:
            continue
        try:
            xf, yf = float(x), float(y)
        except (TypeError, ValueError):
            continue
        if math.isfinite(xf) and math.isfinite(yf):
            xs.append(xf)
            ys.append(yf)
    return Series(label, xs, ys, style) if xs else None


def render_png(spec: PlotSpec, *, width_in: float = 5.2, height_in: float = 2.8, dpi: int = 100) -> bytes:
    fig = new_figure((width_in, height_in), dpi)
    ax = fig.add_subplot(1, 1, 1)
    for i, s in enumerate(spec.series):
        color = COLORS[i % len(COLORS)]
        if s.style == "points":
            ax.plot(s.xs, s.ys, marker="o", markersize=4, linewidth=1.2, color=color, label=s.label)
        else:
            ax.plot(s.xs, s.ys, linewidth=1.2, color=color, label=s.label)
    if spec.band is not None:
        ax.axhspan(spec.band[0], spec.band[1], color="#999999", alpha=0.15, label=spec.band_label or None)
    if spec.logy and all(y > 0 for s in spec.series for y in s.ys):
        ax.set_yscale("log")
    ax.set_title(spec.title, fontsize=11)
    ax.set_xlabel("step")
    ax.xaxis.set_major_locator(integer_locator())
    ax.set_ylabel(spec.ylabel)
    ax.grid(True, alpha=0.3)
    if len(spec.series) > 1 or spec.band is not None:
        ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def png_data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def plot_data_uri(spec: PlotSpec) -> Optional[str]:
    """The plot as a data URI, or None when it has no data at all."""
    spec.series = [s for s in spec.series if s is not None]
    if not spec.series:
        return None
    return png_data_uri(render_png(spec))
