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
from xtts_ft.json_types import JsonValue

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
    series: list[Optional[Series]] = field(default_factory=list)  # None: clean_series found nothing; not drawn
    logy: bool = False
    band: Optional[tuple[float, float]] = None  # a shaded y-range, e.g. the training data's range
    band_label: str = ""


def clean_series(label: str, points: Sequence[tuple[JsonValue, JsonValue]], style: str = "line") -> Optional[Series]:
    """Drop missing, non-numeric and non-finite values (points are (step, value) as a JSON line holds them); None
    when nothing is left."""
    xs: list[float] = []
    ys: list[float] = []
    for x, y in points:
        if not isinstance(x, (int, float, str)) or not isinstance(y, (int, float, str)):  # None, a list, an object
            continue
        try:
            xf, yf = float(x), float(y)
        except ValueError:  # a string that is no number
            continue
        if math.isfinite(xf) and math.isfinite(yf):
            xs.append(xf)
            ys.append(yf)
    return Series(label, xs, ys, style) if xs else None


def render_png(spec: PlotSpec, *, width_in: float = 5.2, height_in: float = 2.8, dpi: int = 100) -> bytes:
    fig = new_figure((width_in, height_in), dpi)
    ax = fig.add_subplot(1, 1, 1)
    drawn = [s for s in spec.series if s is not None]
    for i, s in enumerate(drawn):
        color = COLORS[i % len(COLORS)]
        if s.style == "points":
            ax.plot(s.xs, s.ys, marker="o", markersize=4, linewidth=1.2, color=color, label=s.label)
        else:
            ax.plot(s.xs, s.ys, linewidth=1.2, color=color, label=s.label)
    if spec.band is not None:
        ax.axhspan(spec.band[0], spec.band[1], color="#999999", alpha=0.15, label=spec.band_label or None)
    if spec.logy and all(y > 0 for s in drawn for y in s.ys):
        ax.set_yscale("log")
    ax.set_title(spec.title, fontsize=11)
    ax.set_xlabel("step")
    ax.xaxis.set_major_locator(integer_locator())
    ax.set_ylabel(spec.ylabel)
    ax.grid(True, alpha=0.3)
    if len(drawn) > 1 or spec.band is not None:
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
