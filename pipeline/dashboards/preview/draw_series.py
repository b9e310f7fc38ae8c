"""The panels that draw their fields along axes: Grafana's ``timeseries`` (lines, bars or
points over time, stacked or not, on one or two y axes) and ``barchart`` (a bar per
category and number field), with their legends and threshold styles.

The bar chart's x field and bars follow grafana/grafana's
``public/app/plugins/panel/barchart/utils.ts``. Each drawer returns what its artists
hold, read back from them: a time series ``{series: [(t_ms, value), ...]}``, a bar chart
``{category: {field: value}}``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC
from typing import Any

from matplotlib import dates as mdates
from matplotlib.axes import Axes
from matplotlib.container import BarContainer
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import Formatter

from pipeline.dashboards.preview.canvas import TEXT, Canvas, fit_text, text_px
from pipeline.dashboards.preview.fieldconfig import (
    CannotDraw,
    ShownField,
    calc_name,
    first_of_type,
    reduce_values,
    series_color,
    thresholds,
)
from pipeline.dashboards.preview.frames import FieldType
from pipeline.dashboards.preview.units import format_value

__all__ = ["draw_barchart", "draw_timeseries"]

#: matplotlib's dates are days
_MS_PER_DAY = 86_400_000
_NO_NUMBERS = "the data has no number field to draw (Grafana says: No numeric fields found)"
#: the legends' looks, both panels'
_LEGEND = {"fontsize": 5.5, "frameon": False, "handlelength": 0.8, "handleheight": 0.8,
           "borderaxespad": 0}


# ---------------------------------------------------------------------------------------
# Both: the value axis, the legend, the axes' looks
# ---------------------------------------------------------------------------------------

class _UnitFormatter(Formatter):
    """Axis ticks in the field's unit, decimals from the ticks' spacing (trailing zeros
    trimmed, as Grafana's display processor does for axes)."""

    def __init__(self, unit: str | None, decimals: int | None) -> None:
        self.unit, self.decimals, self.step = unit, decimals, 0.0

    def set_locs(self, locs: Sequence[float]) -> None:
        super().set_locs(locs)
        diffs = [b - a for a, b in zip(locs, locs[1:], strict=False) if b != a]
        self.step = abs(min(diffs, key=abs)) if diffs else 0.0

    def __call__(self, x: float, pos: int | None = None) -> str:
        decimals = self.decimals
        trim = decimals is None
        if decimals is None and self.step:
            decimals = max(0, -math.floor(math.log10(self.step)))
        text = format_value(x, self.unit, decimals)
        if trim:
            m = re.match(r"^(-?\d+\.\d*?)0+(\D.*)?$", text)
            if m:
                text = m.group(1).rstrip(".") + (m.group(2) or "")
        return text


def _legend_shown(opts: Mapping[str, Any]) -> bool:
    """Whether the panel's ``options.legend`` shows a legend."""
    return bool(opts.get("showLegend", True)) and opts.get("displayMode") != "hidden"


def _bottom_legend(canvas: Canvas, handles: Sequence[Any], labels: Sequence[str], ncols: int,
                   **kw: Any) -> None:
    """A legend in ``ncols`` columns at the free area's bottom left."""
    left, bottom, _, _ = canvas.box
    canvas.figure.legend(handles, labels, loc="lower left",
                         bbox_to_anchor=(left / canvas.width_px, bottom / canvas.height_px),
                         ncols=ncols, columnspacing=1.0, borderpad=0, **_LEGEND, **kw)


def _style(ax: Axes) -> None:
    """Small ticks, a light grid under the data, no top or right spine."""
    ax.tick_params(labelsize=6, length=2, pad=1.5, colors=TEXT)
    ax.grid(True, color="#eaeef2", linewidth=0.6)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    for spine in ax.spines.values():
        spine.set_color("#d0d7de")


# ---------------------------------------------------------------------------------------
# Time series
# ---------------------------------------------------------------------------------------

@dataclass
class _Series:
    """A number field of a frame with a time field, as drawn."""

    shown: ShownField
    times: list[int]
    values: list[float]
    stack: tuple[str, str] | None
    #: what is drawn: Line2D or BarContainer
    artist: Any = None


def draw_timeseries(canvas: Canvas, panel: Mapping[str, Any],
                    shown: Sequence[Sequence[ShownField]], now_ms: int) -> dict[str, Any]:
    series = _series_of(shown)
    units = list(dict.fromkeys(s.shown.unit for s in series))
    if len(units) > 2:
        raise CannotDraw(f"{len(units)} units on one panel ({', '.join(map(str, units))}): "
                         "the preview draws two y axes at most")

    legend_opts = (panel.get("options") or {}).get("legend") or {}
    show_legend = _legend_shown(legend_opts)
    entries = [s for s in series if not (s.shown.custom.get("hideFrom") or {}).get("legend")]
    left, bottom, right, top = canvas.box
    right_legend = show_legend and legend_opts.get("placement") == "right"
    legend_rows, ncols, shown_entries = 0, 1, entries
    if show_legend and entries and not right_legend:
        width = max(text_px(_legend_label(s, legend_opts, now_ms), 5.5) for s in entries) + 18
        ncols = max(1, int((right - left) // width))
        max_rows = 3 if canvas.height_px > 200 else 1
        legend_rows = min(math.ceil(len(entries) / ncols), max_rows)
        shown_entries = entries[:ncols * legend_rows]
    legend_h = legend_rows * 10.0
    legend_w = 0.3 * (right - left) if right_legend else 0.0
    # below the axes: tick labels, the date offset ("2023-Nov-15 UTC"), then the legend
    ax = canvas.axes(left + 40, bottom + legend_h + 21, right - legend_w - (40 if len(units)
                     == 2 else 4), top - 2)
    axes_by_unit: dict[str | None, Axes] = {units[0]: ax}
    if len(units) == 2:
        axes_by_unit[units[1]] = ax.twinx()

    bases: dict[tuple[str, str], dict[int, float]] = {}
    totals = _stack_totals(series)
    for s in series:
        target = axes_by_unit[s.shown.unit]
        _plot_series(target, s, bases, totals)

    for unit, target in axes_by_unit.items():
        first = next(s for s in series if s.shown.unit == unit)
        percent_stack = first.stack is not None and first.stack[0] == "percent"
        target.yaxis.set_major_formatter(_UnitFormatter(
            "percentunit" if percent_stack else unit, first.shown.decimals))
        _axis_limits(target, first.shown)
        if first.shown.custom.get("axisLabel"):
            target.set_ylabel(str(first.shown.custom["axisLabel"]), fontsize=6.5)
        _style(target)
    _draw_thresholds(ax, series[0].shown)
    locator = mdates.AutoDateLocator(tz=UTC, minticks=3,
                                     maxticks=max(6, int((right - left) // 80)))
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(
        locator, tz=UTC, offset_formats=["UTC", "%Y UTC", "%Y-%b UTC", "%Y-%b-%d UTC",
                                         "%Y-%b-%d UTC", "%Y-%b-%d %H:%M UTC"]))
    ax.xaxis.get_offset_text().set_fontsize(5.5)
    if canvas.time_range is not None:
        # the range, widened to a bucket that starts before it (a panel's interval wider
        # than the range: an hourly bucket of a ten-minute demo). Grafana clips such a
        # bucket and shows an empty panel; the preview shows the data the query returned.
        times = [t for s in series for t, v in zip(s.times, s.values, strict=True)
                 if not math.isnan(v)]
        low = min([canvas.time_range[0], *times])
        high = max([canvas.time_range[1], *times])
        ax.set_xlim(low / _MS_PER_DAY, high / _MS_PER_DAY)
    if show_legend and entries:
        _legend(canvas, ax, shown_entries, len(entries), legend_opts, now_ms, ncols,
                right_legend)
    return _series_data(series)


def _series_of(shown: Sequence[Sequence[ShownField]]) -> list[_Series]:
    """The number fields of the frames with a time field, each a series."""
    series: list[_Series] = []
    has_time = False
    for frame_fields in shown:
        t = first_of_type(frame_fields, FieldType.TIME)
        if t is None:
            continue
        has_time = True
        for s in frame_fields:
            if s.field.type is not FieldType.NUMBER or s.hidden():
                continue
            stacking = s.custom.get("stacking") or {}
            mode = str(stacking.get("mode") or "none")
            stack = (mode, str(stacking.get("group") or "A")) if mode != "none" else None
            series.append(_Series(s, [int(v) for v in t.field.values],
                                  [math.nan if v is None else float(v)
                                   for v in s.field.values], stack))
    if not has_time:
        raise CannotDraw("the data has no time field (Grafana says: Data does not have a "
                         "time field)")
    if not series:
        raise CannotDraw(_NO_NUMBERS)
    return series


def _stack_totals(series: Sequence[_Series]) -> dict[tuple[str, str], dict[int, float]]:
    """Per percent-stacking group, the sum of its series at each time (nulls as 0)."""
    totals: dict[tuple[str, str], dict[int, float]] = {}
    for s in series:
        if s.stack is not None and s.stack[0] == "percent":
            group = totals.setdefault(s.stack, {})
            for t, v in zip(s.times, s.values, strict=True):
                group[t] = group.get(t, 0.0) + (0.0 if math.isnan(v) else v)
    return totals


def _plot_series(ax: Axes, s: _Series, bases: dict[tuple[str, str], dict[int, float]],
                 totals: Mapping[tuple[str, str], Mapping[int, float]]) -> None:
    custom = s.shown.custom
    color = series_color(s.shown)
    style = str(custom.get("drawStyle") or "line")
    fill = float(custom.get("fillOpacity") or 0) / 100
    width = float(custom.get("lineWidth") if custom.get("lineWidth") is not None else 1)
    x = [t / _MS_PER_DAY for t in s.times]
    y = list(s.values)
    base = [0.0] * len(y)
    if s.stack is not None:
        # a stacked series sits on the group's sum so far; a null counts as 0 below it
        group = bases.setdefault(s.stack, {})
        total = totals.get(s.stack)
        if total is not None:
            y = [v / total[t] if total.get(t) else math.nan for t, v in zip(s.times, y,
                                                                             strict=True)]
        base = [group.get(t, 0.0) for t in s.times]
        for t, v in zip(s.times, y, strict=True):
            group[t] = group.get(t, 0.0) + (0.0 if math.isnan(v) else v)
    if style == "bars":
        step = min((b - a for a, b in zip(x, x[1:], strict=False) if b > a), default=1 / 1440)
        keep = [i for i, v in enumerate(y) if not math.isnan(v)]
        s.artist = ax.bar([x[i] for i in keep], [y[i] for i in keep], width=step * 0.8,
                          bottom=[base[i] for i in keep], color=color,
                          alpha=max(fill, 0.3) if fill else 0.9, linewidth=0,
                          label=s.shown.name)
        return
    tops = [b + v for b, v in zip(base, y, strict=True)]
    if style == "points":
        (line,) = ax.plot(x, tops, linestyle="none", marker="o", markersize=2.5, color=color,
                          label=s.shown.name)
    else:
        if custom.get("spanNulls") is True:
            pairs = [(a, b) for a, b in zip(x, tops, strict=True) if not math.isnan(b)]
            xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
        else:
            xs, ys = x, tops
        (line,) = ax.plot(xs, ys, color=color, linewidth=width, label=s.shown.name)
        # a point between two nulls is no line at all: uPlot, under Grafana's showPoints
        # "auto", draws it as a dot (and "always" draws every point)
        dots = [i for i in range(len(ys)) if not math.isnan(ys[i])
                and (custom.get("showPoints") == "always"
                     or all(j < 0 or j >= len(ys) or math.isnan(ys[j]) for j in (i - 1, i + 1)))]
        if dots:
            ax.plot([xs[i] for i in dots], [ys[i] for i in dots], linestyle="none",
                    marker="o", markersize=2.5, color=color)
    if fill > 0:
        ax.fill_between(x, base, tops, color=color, alpha=fill, linewidth=0)
    s.artist = line


def _axis_limits(ax: Axes, s: ShownField) -> None:
    scale = s.custom.get("scaleDistribution") or {}
    if scale.get("type") == "log":
        ax.set_yscale("log", base=float(scale.get("log") or 10))
    lo, hi = s.config.get("min"), s.config.get("max")
    soft_lo, soft_hi = s.custom.get("axisSoftMin"), s.custom.get("axisSoftMax")
    cur_lo, cur_hi = ax.get_ylim()
    if lo is None and soft_lo is not None:
        lo = min(cur_lo, float(soft_lo))
    if hi is None and soft_hi is not None:
        hi = max(cur_hi, float(soft_hi))
    if lo is not None or hi is not None:
        ax.set_ylim(bottom=None if lo is None else float(lo), top=None if hi is None
                    else float(hi))


def _draw_thresholds(ax: Axes, s: ShownField) -> None:
    """custom.thresholdsStyle: lines, dashes and/or areas at the threshold steps."""
    style = str((s.custom.get("thresholdsStyle") or {}).get("mode") or "off")
    if style == "off":
        return
    mode, steps = thresholds(s.config)
    lo, hi = ax.get_ylim()
    def at(v: float) -> float:
        return lo + (hi - lo) * v / 100 if mode == "percentage" else v
    if "area" in style:
        for (start, color), (end, _) in zip(steps, [*steps[1:], (math.inf, "")], strict=True):
            a, b = max(at(start) if start > -math.inf else lo, lo), min(at(end), hi)
            if b > a:
                ax.axhspan(a, b, color=color, alpha=0.12, linewidth=0, zorder=0)
    if "line" in style or "dashed" in style:
        for start, color in steps[1:]:
            ax.axhline(at(start), color=color, linewidth=1,
                       linestyle="--" if "dashed" in style else "-", zorder=1)
    ax.set_ylim(lo, hi)


def _legend_label(s: _Series, opts: Mapping[str, Any], now_ms: int) -> str:
    calcs = opts.get("calcs") or []
    if not calcs:
        return s.shown.name
    values = [None if math.isnan(v) else v for v in s.values]
    shown = [f"{calc_name(c)}: {s.shown.text(reduce_values(values, c), now_ms)}"
             for c in calcs]
    return f"{s.shown.name}  " + "  ".join(shown)


def _legend(canvas: Canvas, ax: Axes, entries: Sequence[_Series], total: int,
            opts: Mapping[str, Any], now_ms: int, ncols: int, right: bool) -> None:
    handles: list[Any] = [Patch(color=series_color(s.shown)) for s in entries]
    labels = [_legend_label(s, opts, now_ms) for s in entries]
    if total > len(entries):
        handles[-1] = Patch(color="none")
        labels[-1] = f"+{total - len(entries) + 1} more"
    if not right:
        # matplotlib fills a legend's columns first; Grafana's list reads along the rows
        order = [i for c in range(ncols) for i in range(c, len(handles), ncols)]
        handles, labels = [handles[i] for i in order], [labels[i] for i in order]
    left, bottom, r, top = canvas.box
    if right:
        anchor = ((r - 0.3 * (r - left)) / canvas.width_px, top / canvas.height_px)
        canvas.figure.legend(handles, labels, loc="upper left", bbox_to_anchor=anchor,
                             labelspacing=0.3, **_LEGEND)
        return
    _bottom_legend(canvas, handles, labels, ncols, labelspacing=0.25)


def _series_data(series: Sequence[_Series]) -> dict[str, list[tuple[int, float]]]:
    """Each series' points read back from its artist (a stacked one unstacked: its top
    minus the group's sum below it, nulls counting as 0)."""
    out: dict[str, list[tuple[int, float]]] = {}
    below: dict[tuple[str, str], dict[int, float]] = {}
    for s in series:
        if isinstance(s.artist, BarContainer):
            points = [(round((p.get_x() + p.get_width() / 2) * _MS_PER_DAY), p.get_height())
                      for p in s.artist.patches]
            if s.stack is not None:   # a line stacked on these bars sits on their heights
                group = below.setdefault(s.stack, {})
                for t, value in points:
                    group[t] = group.get(t, 0.0) + value
        else:
            line: Line2D = s.artist
            raw = [(round(float(x) * _MS_PER_DAY), float(y)) for x, y in line.get_xydata()]
            if s.stack is not None:
                group = below.setdefault(s.stack, {})
                points = []
                for t, top in raw:
                    value = top - group.get(t, 0.0)
                    group[t] = group.get(t, 0.0) + (0.0 if math.isnan(value) else value)
                    points.append((t, value))
            else:
                points = raw
        name = s.shown.name
        while name in out:
            name += " "
        out[name] = [(t, float(v)) for t, v in points if not math.isnan(v)]
    return out


# ---------------------------------------------------------------------------------------
# Bar chart
# ---------------------------------------------------------------------------------------

def draw_barchart(canvas: Canvas, panel: Mapping[str, Any],
                  shown: Sequence[Sequence[ShownField]], now_ms: int) -> dict[str, Any]:
    opts = panel.get("options") or {}
    frame_fields = next((fs for fs in shown if fs and fs[0].frame.length), shown[0])
    x = _x_field(frame_fields, opts.get("xField"))
    ys = [s for s in frame_fields if s is not x and s.field.type is FieldType.NUMBER
          and not s.hidden()]
    if not ys:
        raise CannotDraw(_NO_NUMBERS)
    categories = [x.text(v, now_ms) for v in x.field.values]
    orientation = str(opts.get("orientation") or "auto")
    horizontal = orientation == "horizontal" or (
        orientation == "auto" and canvas.width_px < canvas.height_px)
    stacking = str(opts.get("stacking") or "none")
    show_legend = _legend_shown(opts.get("legend") or {})

    left, bottom, right, top = canvas.box
    legend_h = 10.0 if show_legend else 0.0
    label_px = min(max(text_px(c, 6) for c in categories) + 8, 0.4 * (right - left)) \
        if horizontal else 40.0
    ax = canvas.axes(left + label_px, bottom + legend_h + 14, right - 6, top - 2)
    n, k = len(categories), len(ys)
    group_w = float(opts.get("groupWidth") or 0.7)
    bar_w = float(opts.get("barWidth") or 0.97)
    stacked = stacking in ("normal", "percent")
    width = group_w * bar_w if stacked or k == 1 else group_w / k * bar_w
    values = [[math.nan if v is None else float(v) for v in s.field.values] for s in ys]
    if stacking == "percent":
        sums = [sum(0.0 if math.isnan(col[i]) else col[i] for col in values) for i in range(n)]
        values = [[v / sums[i] if sums[i] else math.nan for i, v in enumerate(col)]
                  for col in values]
    base = [0.0] * n
    containers: list[tuple[ShownField, BarContainer]] = []
    for j, (s, col) in enumerate(zip(ys, values, strict=True)):
        offset = 0.0 if stacked or k == 1 else (j - (k - 1) / 2) * group_w / k
        pos = [i + offset for i in range(n)]
        draw = ax.barh if horizontal else ax.bar
        kw = {"left": base} if horizontal else {"bottom": base}
        container = draw(pos, col, width, color=series_color(s), label=s.name, linewidth=0,
                         **kw)
        containers.append((s, container))
        if stacked:
            base = [b + (0.0 if math.isnan(v) else v) for b, v in zip(base, col, strict=True)]
    unit = "percentunit" if stacking == "percent" else ys[0].unit
    value_axis = ax.xaxis if horizontal else ax.yaxis
    value_axis.set_major_formatter(_UnitFormatter(unit, ys[0].decimals))
    shown_labels = [fit_text(c, label_px - 6 if horizontal else (right - left) / max(n, 1), 6)
                    for c in categories]
    if horizontal:
        ax.set_yticks(range(n), shown_labels)
        ax.invert_yaxis()   # the first category on top, as Grafana's horizontal bars
    else:
        ax.set_xticks(range(n), shown_labels)
    _style(ax)
    ax.grid(axis="y" if horizontal else "x", visible=False)
    if not stacked and opts.get("showValue", "auto") != "never" and n * k <= 24:
        _bar_labels(ax, containers, horizontal, now_ms)
    if show_legend:
        _bottom_legend(canvas, [Patch(color=series_color(s)) for s in ys], [s.name for s in ys],
                       max(1, min(k, 4)))
    return _bar_data(ax, containers, horizontal, categories)


def _x_field(frame_fields: Sequence[ShownField], x_name: Any) -> ShownField:
    """The field of the bars' categories: ``options.xField``, else the first string field,
    else the first time field."""
    if x_name:
        x = next((s for s in frame_fields if x_name in (s.name, s.field.name)), None)
        if x is None:
            raise CannotDraw(f"the x field {x_name!r} (options.xField) is not in the data "
                             "(Grafana says: Configured x field not found)")
        return x
    x = first_of_type(frame_fields, FieldType.STRING) or \
        first_of_type(frame_fields, FieldType.TIME)
    if x is None:
        raise CannotDraw("the data has no string or time field for the bars' categories "
                         "(Grafana says: Bar charts requires a string or time field)")
    return x


def _bar_labels(ax: Axes, containers: Sequence[tuple[ShownField, BarContainer]],
                horizontal: bool, now_ms: int) -> None:
    """Each bar's value at its end (a bar without a value has none)."""
    for s, container in containers:
        for patch, value in zip(container.patches, _bar_values(container, horizontal),
                                strict=True):
            if math.isnan(value):
                continue
            if horizontal:
                xy, align = (value, patch.get_y() + patch.get_height() / 2), \
                    {"ha": "left", "va": "center"}
            else:
                xy, align = (patch.get_x() + patch.get_width() / 2, value), \
                    {"ha": "center", "va": "bottom"}
            ax.annotate(s.text(value, now_ms), xy, xytext=(2, 0) if horizontal else (0, 1.5),
                        textcoords="offset points", fontsize=5.5, color=TEXT,
                        annotation_clip=False, **align)


def _bar_values(container: BarContainer, horizontal: bool) -> list[float]:
    return [p.get_width() if horizontal else p.get_height() for p in container.patches]


def _bar_data(ax: Axes, containers: Sequence[tuple[ShownField, BarContainer]], horizontal: bool,
              categories: Sequence[str]) -> dict[str, dict[str, float | None]]:
    """``{category: {field: value}}`` from the bars (the category of each position from the
    axis' tick labels, the full text when the label was shortened)."""
    ticks = ax.get_yticks() if horizontal else ax.get_xticks()
    out: dict[str, dict[str, float | None]] = {}
    for s, container in containers:
        for patch, value in zip(container.patches, _bar_values(container, horizontal),
                                strict=True):
            center = (patch.get_y() + patch.get_height() / 2) if horizontal else \
                (patch.get_x() + patch.get_width() / 2)
            position = min(range(len(ticks)), key=lambda i: abs(ticks[i] - center))
            row = out.setdefault(categories[position], {})
            row[s.name] = None if math.isnan(value) else float(value)
    return out


