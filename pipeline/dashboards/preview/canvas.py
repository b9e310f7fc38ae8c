"""The figure a panel is drawn on: the panel's size on Grafana's grid, its title on top, a
footer line below, and the free area between in pixels; and the measures of text the
drawings fit into it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.text import Text

__all__ = ["DPI", "GRID_COLUMN_PX", "GRID_ROW_PX", "MUTED", "TEXT", "Canvas", "chars_in",
           "fit_text", "panel_size_px",
           "text_px"]

DPI = 100
#: Grafana's grid: 24 columns (a 24-wide panel about 1200 px), 30 px a height unit, 8 px
#: between panels
_COLUMN_PX = 50
_UNIT_PX = 30
_MARGIN_PX = 8
_HEADER_PX = 20
_FOOTER_PX = 12

TEXT = "#24292e"        # the light theme's primary text
MUTED = "#6e7781"

#: an average character's width in ems (DejaVu Sans; bold and monospace a little wider)
_EM = 0.6


#: one grid column, and one height unit with the margin below it, in pixels
GRID_COLUMN_PX = _COLUMN_PX
GRID_ROW_PX = _UNIT_PX + _MARGIN_PX


def panel_size_px(panel: Mapping[str, Any]) -> tuple[int, int]:
    """The panel's size in pixels on Grafana's grid (two height units at least)."""
    grid = panel.get("gridPos") or {}
    w = min(max(int(grid.get("w") or 12), 1), 24)
    h = max(int(grid.get("h") or 8), 2)
    return w * _COLUMN_PX, h * (_UNIT_PX + _MARGIN_PX) - _MARGIN_PX


def text_px(text: str, fontsize: float) -> float:
    """About how wide ``text`` is at ``fontsize`` points."""
    return len(text) * fontsize * DPI / 72 * _EM


def chars_in(width_px: float, fontsize: float) -> int:
    """About how many characters at ``fontsize`` points fill ``width_px``."""
    return int(width_px / (fontsize * DPI / 72 * _EM))


def fit_text(text: str, width_px: float, fontsize: float) -> str:
    """``text`` cut with an ellipsis to about ``width_px`` at ``fontsize`` points."""
    room = max(chars_in(width_px, fontsize), 4)
    return text if len(text) <= room else text[:room - 1] + "\N{HORIZONTAL ELLIPSIS}"


class Canvas:
    """A figure of the panel's size, framed, with the panel's title on top."""

    def __init__(self, panel: Mapping[str, Any],
                 time_range: tuple[int, int] | None = None) -> None:
        self.width_px, self.height_px = panel_size_px(panel)
        #: the queries' time range (epoch ms): a time axis spans it, as in Grafana
        self.time_range = time_range
        self.title = str(panel.get("title") or "(untitled panel)")
        fig = Figure(figsize=(self.width_px / DPI, self.height_px / DPI), dpi=DPI,
                     facecolor="white")
        FigureCanvasAgg(fig)
        fig.add_artist(Rectangle((0, 0), 1, 1, transform=fig.transFigure, fill=False,
                                 edgecolor="#d0d7de", linewidth=1))
        fig.text(6 / self.width_px, 1 - 11 / self.height_px,
                 fit_text(self.title, self.width_px - 12, 8.5), fontsize=8.5, weight="bold",
                 color=TEXT, va="center", ha="left")
        self.figure = fig
        #: the free area in pixels from the bottom left: left, bottom, right, top (the
        #: footer below it is for a note of one line)
        self.box = (6.0, float(_FOOTER_PX), self.width_px - 6.0,
                    float(self.height_px - _HEADER_PX))

    def axes(self, left: float, bottom: float, right: float, top: float) -> Axes:
        """Axes over the given pixels (one pixel at least each way)."""
        w, h = self.width_px, self.height_px
        return self.figure.add_axes((left / w, bottom / h, max(right - left, 1) / w,
                                     max(top - bottom, 1) / h))

    def text(self, x_px: float, y_px: float, text: str, **kw: Any) -> Text:
        """A text of the figure at the given pixel, ``kw`` as matplotlib's."""
        return self.figure.text(x_px / self.width_px, y_px / self.height_px, text, **kw)
