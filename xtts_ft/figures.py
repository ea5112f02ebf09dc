"""The one place matplotlib is imported.

matplotlib is used as a plain library: a ``Figure`` with its own Agg canvas, never pyplot, so no global
backend is chosen and no figure state is shared. It is imported on the first call, so that reading a run,
preparing a dataset or serving a voice never pays for it. It sits at the bottom of the package because
both the dataset report (data) and the run report and web page (evaluate, webapp) draw with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # names for annotations; at run time matplotlib is imported on the first call
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator


def new_figure(figsize: tuple[float, float], dpi: float | None = None) -> Figure:
    """A ``matplotlib.figure.Figure`` of ``figsize`` inches with an Agg canvas attached (PNG, SVG, PDF output)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, dpi=dpi)
    FigureCanvasAgg(fig)
    return fig


def integer_locator() -> MaxNLocator:
    """Axis ticks at whole numbers only (training steps)."""
    from matplotlib.ticker import MaxNLocator

    return MaxNLocator(integer=True)
