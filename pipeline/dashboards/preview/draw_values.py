"""The panels that show one value a field: Grafana's ``stat`` (the value large, coloured by
the thresholds, over a sparkline) and ``bargauge`` (a bar from the field's min to the
value). Each drawer returns ``{name: value}``: a stat's reduced values (shown as the texts
of :meth:`~pipeline.dashboards.preview.draw.Drawing.texts`), a bar gauge's read back from
its bars.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from matplotlib.axes import Axes
from matplotlib.patches import Rectangle

from pipeline.dashboards.preview.canvas import DPI, TEXT, Canvas, fit_text, text_px
from pipeline.dashboards.preview.fieldconfig import (
    DisplayValue,
    ShownField,
    as_number,
    display_values,
    field_range,
    value_color,
)

__all__ = ["draw_bargauge", "draw_stat"]


def draw_stat(canvas: Canvas, panel: Mapping[str, Any], shown: Sequence[Sequence[ShownField]],
              now_ms: int) -> dict[str, Any]:
    opts = panel.get("options") or {}
    values = display_values(panel, shown)
    color_mode = str(opts.get("colorMode") or "value")
    text_mode = str(opts.get("textMode") or "auto")
    graph = str(opts.get("graphMode") or "area") == "area"
    show_name = text_mode in ("value_and_name", "name") or (text_mode == "auto" and
                                                             len(values) > 1)
    show_value = text_mode not in ("name", "none")
    left, bottom, right, top = canvas.box
    n = len(values)
    wide = (right - left) >= (top - bottom)
    cols = n if wide and n <= 6 else max(1, min(n, round(math.sqrt(
        n * (right - left) / max(top - bottom, 1)))))
    rows = math.ceil(n / cols)
    cell_w, cell_h = (right - left) / cols, (top - bottom) / rows
    flat = [s for fs in shown for s in fs]
    data: dict[str, Any] = {}
    for i, v in enumerate(values):
        x0 = left + (i % cols) * cell_w
        y0 = top - (i // cols + 1) * cell_h
        vmin, vmax = field_range(flat, v.shown)
        number = as_number(v.value)
        color = value_color(v.shown, number, vmin, vmax)
        text = v.shown.text(v.value, now_ms) or "No data"
        ax = canvas.axes(x0 + 2, y0 + 2, x0 + cell_w - 2, y0 + cell_h - 2)
        ax.set_axis_off()
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        fg = TEXT
        if color_mode in ("background", "background_solid"):
            ax.add_patch(Rectangle((0, 0), 1, 1, transform=ax.transAxes, facecolor=color,
                                   edgecolor="none"))
            fg = "white"
        elif color_mode == "value":
            fg = color
        if graph and len(v.spark) > 1 and number is not None:
            _sparkline(ax, v.spark, "white" if fg == "white" else color)
        name_px = 0.0
        if show_name:
            name_size = min(max(cell_h * 0.12, 6.0), 9.0)
            name_px = name_size * DPI / 72 * 1.5
            ax.text(0.5, 1 - name_px / 2 / cell_h, fit_text(v.name, cell_w - 6, name_size),
                    ha="center", va="center", fontsize=name_size,
                    color="white" if fg == "white" else TEXT, transform=ax.transAxes)
        if show_value:
            size = _big_size(text, cell_w - 8, cell_h - name_px - 4)
            ax.text(0.5, (1 - name_px / cell_h) / 2, text, ha="center", va="center",
                    fontsize=size, weight="bold", color=fg, transform=ax.transAxes,
                    gid=f"stat-value:{v.name}")
        data[v.name] = v.value
    return data


def _big_size(text: str, width_px: float, height_px: float) -> float:
    by_width = width_px / max(len(text), 1) / 0.62 * 72 / DPI
    by_height = height_px * 0.6 * 72 / DPI
    return max(min(by_width, by_height, 40.0), 6.0)


def _sparkline(ax: Axes, points: Sequence[tuple[float, float]], color: str) -> None:
    spark = ax.inset_axes((0, 0, 1, 0.4))
    spark.set_axis_off()
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    spark.fill_between(xs, min(ys), ys, color=color, alpha=0.18, linewidth=0)
    spark.plot(xs, ys, color=color, linewidth=0.8, alpha=0.6)
    spark.set_xlim(min(xs), max(xs))


def draw_bargauge(canvas: Canvas, panel: Mapping[str, Any],
                  shown: Sequence[Sequence[ShownField]], now_ms: int) -> dict[str, Any]:
    opts = panel.get("options") or {}
    values = display_values(panel, shown)
    orientation = str(opts.get("orientation") or "auto")
    horizontal = orientation == "horizontal" or (
        orientation == "auto" and canvas.width_px <= canvas.height_px)
    flat = [s for fs in shown for s in fs]
    left, bottom, right, top = canvas.box
    n = len(values)
    bars: list[tuple[DisplayValue, Rectangle]] = []
    if horizontal:
        slot = (top - bottom) / n
        size = min(max(slot * 0.45 * 72 / DPI, 6), 14)
        label_px = min(max(text_px(v.name, 6.5) for v in values) + 8, 0.35 * (right - left))
        value_px = min(max(text_px(v.shown.text(v.value, now_ms), size) for v in values) + 10,
                       0.4 * (right - left))
        for i, v in enumerate(values):
            y1 = top - i * slot
            ax = canvas.axes(left + label_px, y1 - slot * 0.85, right - value_px, y1 - slot * 0.1)
            bars.append((v, _gauge_bar(ax, v, flat, True)))
            canvas.text(left + label_px - 4, y1 - slot * 0.475, fit_text(v.name, label_px - 6, 6.5),
                        fontsize=6.5, ha="right", va="center", color=TEXT)
            canvas.text(right - value_px + 4, y1 - slot * 0.475, v.shown.text(v.value, now_ms),
                        fontsize=size, weight="bold", ha="left", va="center",
                        color=bars[-1][1].get_facecolor())
    else:
        slot = (right - left) / n
        for i, v in enumerate(values):
            x0 = left + i * slot
            ax = canvas.axes(x0 + slot * 0.15, bottom + 12, x0 + slot * 0.85, top - 16)
            bars.append((v, _gauge_bar(ax, v, flat, False)))
            canvas.text(x0 + slot / 2, bottom + 5, fit_text(v.name, slot - 4, 6), fontsize=6,
                        ha="center", va="center", color=TEXT)
            canvas.text(x0 + slot / 2, top - 8, v.shown.text(v.value, now_ms),
                        fontsize=min(max(slot * 0.12, 6), 12), weight="bold", ha="center",
                        va="center", color=bars[-1][1].get_facecolor())
    return {v.name: None if not isinstance(v.value, int | float) else
            (rect.get_x() + rect.get_width()) if horizontal else
            (rect.get_y() + rect.get_height()) for v, rect in bars}


def _gauge_bar(ax: Axes, v: DisplayValue, flat: Sequence[ShownField], horizontal: bool
               ) -> Rectangle:
    """One bar from the field's min to its value, coloured by the thresholds, on the
    unfilled rest (the bar is not clipped to max: the axes clip the picture)."""
    vmin, vmax = field_range(flat, v.shown)
    if vmax <= vmin:
        vmin = vmax - 1   # one value: Grafana's range is empty; show it full
    number = as_number(v.value)
    if number is None:
        number = vmin
    color = value_color(v.shown, number, vmin, vmax)
    ax.set_axis_off()
    if horizontal:
        ax.set_xlim(vmin, vmax)
        ax.set_ylim(0, 1)
        ax.add_patch(Rectangle((vmin, 0), vmax - vmin, 1, facecolor="#eaeef2",
                               edgecolor="none"))
        rect = Rectangle((vmin, 0), number - vmin, 1, facecolor=color, edgecolor="none")
    else:
        ax.set_ylim(vmin, vmax)
        ax.set_xlim(0, 1)
        ax.add_patch(Rectangle((0, vmin), 1, vmax - vmin, facecolor="#eaeef2",
                               edgecolor="none"))
        rect = Rectangle((0, vmin), 1, number - vmin, facecolor=color, edgecolor="none")
    ax.add_patch(rect)
    return rect


