"""One dashboard panel drawn with matplotlib from its data frames, as Grafana's panel of that
type shows them -- a preview, and every image says so.

:func:`draw_panel` takes a panel of the dashboard JSON and the frames its queries gave
(after expressions and transformations) and returns a :class:`Drawing`: the figure, what it
shows as plain values read back from the figure's artists (for tests), and why it is a
placeholder or empty when it is one. The panel's field config is applied by
:mod:`~pipeline.dashboards.preview.fieldconfig`, values written by
:mod:`~pipeline.dashboards.preview.units`, and each type drawn on a
:class:`~pipeline.dashboards.preview.canvas.Canvas` by its module: ``timeseries`` and
``barchart`` by :mod:`~pipeline.dashboards.preview.draw_series`, ``stat`` and
``bargauge`` by :mod:`~pipeline.dashboards.preview.draw_values`, ``table`` and ``logs``
by :mod:`~pipeline.dashboards.preview.draw_tables`. Any other panel type, and any option
whose meaning the preview cannot honour, gives a labelled placeholder naming what is
missing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.text import Text

from pipeline.dashboards.preview.canvas import DPI, MUTED, TEXT, Canvas, chars_in
from pipeline.dashboards.preview.draw_series import draw_barchart, draw_timeseries
from pipeline.dashboards.preview.draw_tables import draw_logs, draw_table
from pipeline.dashboards.preview.draw_values import draw_bargauge, draw_stat
from pipeline.dashboards.preview.fieldconfig import (
    CannotDraw,
    NoValues,
    ShownField,
    resolve_fields,
)
from pipeline.dashboards.preview.frames import Frame

__all__ = ["WATERMARK", "Drawing", "draw_panel"]

#: the note every image carries
WATERMARK = "Preview by jobstream \N{EM DASH} not Grafana's rendering"


@dataclass
class Drawing:
    """A panel drawn: the figure and what it shows.

    ``data`` is what the figure holds, as plain values read back from its artists:
    a time series ``{series: [(t_ms, value), ...]}`` (points with no value left out,
    stacked series unstacked); a bar chart ``{category: {field: value}}``; a bar gauge
    ``{name: value}`` (from the bars); a stat ``{name: value}`` (the reduced values, shown
    as the texts of :meth:`texts`); a table ``{"header": [...], "rows": [[...]], "more":
    n}`` (the cells' texts); logs ``{"lines": [...]}``; ``{}`` for a placeholder or an
    empty panel.
    """

    figure: Figure
    #: the panel type drawn, or "placeholder" or "empty"
    kind: str
    title: str
    #: what the placeholder stands for; "" when drawn for real
    placeholder: str = ""
    #: None when there were rows to draw; else why there were none ("" when unknown)
    empty_reason: str | None = None
    data: Any = field(default_factory=dict)

    def save(self, path: Path) -> Path:
        """Write the PNG (the panel's size on Grafana's grid at 100 dpi)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        self.figure.savefig(path, dpi=DPI, facecolor="white")
        return path

    def texts(self) -> list[str]:
        """Every non-empty text of the figure (titles, values, cells, labels, notes)."""
        return [t.get_text() for t in self.figure.findobj(Text) if t.get_text()]


#: a panel type's drawer: what it draws, as :attr:`Drawing.data`
_Drawer = Callable[[Canvas, Mapping[str, Any], Sequence[Sequence[ShownField]], int],
                   dict[str, Any]]
_DRAWERS: dict[str, _Drawer] = {
    "timeseries": draw_timeseries,
    "barchart": draw_barchart,
    "bargauge": draw_bargauge,
    "stat": draw_stat,
    "table": draw_table,
    "logs": draw_logs,
}


def draw_panel(panel: Mapping[str, Any], frames: Sequence[Frame], *, empty_reason: str = "",
               placeholder: str = "", now_ms: int | None = None,
               time_range: tuple[int, int] | None = None) -> Drawing:
    """Draw ``panel`` from ``frames``. ``placeholder``: what the caller could not do for this
    panel (a query on another data source, a transformation...) -- drawn as a placeholder
    naming it. ``empty_reason``: why there are no rows, shown under "No data". ``now_ms``:
    the time relative units (``dateTimeFromNow``) count from; the clock when None.
    ``time_range``: the queries' range (epoch ms), which a time axis spans; the data's
    own span when None."""
    kind = str(panel.get("type") or "")
    if kind == "row":
        raise ValueError("row panels are the page's headings, not drawings")
    now = int(time.time() * 1000) if now_ms is None else now_ms
    if placeholder:
        return _placeholder(panel, placeholder)
    drawer = _DRAWERS.get(kind)
    if drawer is None:
        return _placeholder(panel, f"panel type {kind!r} is not drawn by the preview")
    if not any(f.length for f in frames):
        return _empty(panel, empty_reason)
    canvas = _canvas(panel, time_range)
    try:
        data = drawer(canvas, panel, resolve_fields(panel, frames), now)
    except CannotDraw as exc:
        return _placeholder(panel, str(exc))
    except NoValues as exc:
        return _empty(panel, str(exc))
    return Drawing(canvas.figure, kind, canvas.title, data=data)


def _canvas(panel: Mapping[str, Any], time_range: tuple[int, int] | None = None) -> Canvas:
    """The panel's canvas with the watermark in its footer."""
    canvas = Canvas(panel, time_range)
    canvas.figure.text(1 - 5 / canvas.width_px, 6 / canvas.height_px, WATERMARK,
                       fontsize=5.5, color=MUTED, va="center", ha="right", style="italic")
    return canvas


def _message(canvas: Canvas, lines: Sequence[tuple[str, float, str]], *,
             backed: bool = False) -> None:
    """Centred lines of (text, size, colour) in the free area, wrapped to its width
    (``backed``: on white, to read over a hatched placeholder)."""
    left, bottom, right, top = canvas.box
    wrapped: list[tuple[str, float, str]] = []
    for text, size, color in lines:
        room = max(chars_in(right - left - 12, size), 8)
        for part in _wrap(text, room):
            wrapped.append((part, size, color))
    heights = [s * DPI / 72 * 1.35 for _, s, _ in wrapped]
    y = (top + bottom) / 2 + sum(heights) / 2
    for (text, size, color), h in zip(wrapped, heights, strict=True):
        y -= h
        canvas.text((left + right) / 2, y + h / 2, text, fontsize=size, color=color,
                    ha="center", va="center",
                    bbox={"facecolor": "white", "edgecolor": "none", "pad": 1.5}
                    if backed else None)


def _wrap(text: str, width: int) -> list[str]:
    words, lines, line = text.split(), [], ""
    for word in words:
        while len(word) > width:
            if line:
                lines.append(line)
                line = ""
            lines.append(word[:width])
            word = word[width:]
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    if line:
        lines.append(line)
    return lines or [""]


def _placeholder(panel: Mapping[str, Any], reason: str) -> Drawing:
    canvas = _canvas(panel)
    left, bottom, right, top = canvas.box
    ax = canvas.axes(left, bottom, right, top)
    ax.set_axis_off()
    ax.add_patch(Rectangle((0, 0), 1, 1, transform=ax.transAxes, facecolor="#f6f8fa",
                           edgecolor="#d8dee4", hatch="//", linewidth=0.8))
    _message(canvas, [("Not drawn by the preview", 9, TEXT), (reason, 7, TEXT)],
             backed=True)
    return Drawing(canvas.figure, "placeholder", canvas.title, placeholder=reason)


def _empty(panel: Mapping[str, Any], reason: str) -> Drawing:
    canvas = _canvas(panel)
    lines = [("No data", 12, MUTED)]
    if reason:
        lines.append((reason, 7, MUTED))
    no_value = ((panel.get("fieldConfig") or {}).get("defaults") or {}).get("noValue")
    if no_value:
        lines.append((f"Grafana shows: {no_value}", 7, MUTED))
    _message(canvas, lines)
    return Drawing(canvas.figure, "empty", canvas.title, empty_reason=reason)


