"""The panels that list rows: Grafana's ``table`` (the first frame with rows, as many rows
as fit, the rest counted) and ``logs`` (the newest lines that fit, each line the frame's
first string field, as grafana/grafana's ``public/app/features/logs/logsFrame.ts`` takes
the body). Each drawer returns the texts it drew: a table ``{"header": [...], "rows":
[[...]], "more": n}``, logs ``{"lines": [...]}``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from matplotlib.table import Table

from pipeline.dashboards.preview.canvas import MUTED, TEXT, Canvas, fit_text
from pipeline.dashboards.preview.fieldconfig import CannotDraw, NoValues, ShownField, first_of_type
from pipeline.dashboards.preview.frames import FieldType
from pipeline.dashboards.preview.units import TIME_FORMAT, utc

__all__ = ["draw_logs", "draw_table"]

_TABLE_ROWS_MAX = 40


def draw_table(canvas: Canvas, panel: Mapping[str, Any], shown: Sequence[Sequence[ShownField]],
               now_ms: int) -> dict[str, Any]:
    with_rows = [fs for fs in shown if fs and fs[0].frame.length]
    frame_fields = [s for s in with_rows[0] if not s.hidden()]
    if not frame_fields:
        raise NoValues("every field of the table is hidden (custom.hidden)")
    frame = frame_fields[0].frame
    left, bottom, right, top = canvas.box
    note = ""
    if len(with_rows) > 1:
        note = f"frame 1 of {len(with_rows)} (Grafana offers the others in a selector)"
    row_px = 12.5
    fit_rows = max(int((top - bottom - 12) // row_px) - 1, 1)
    limit = min(fit_rows, _TABLE_ROWS_MAX)
    if frame.length > limit:
        limit = max(limit - 1, 1)
    rows = [[s.text(s.field.values[i], now_ms) for s in frame_fields]
            for i in range(min(frame.length, limit))]
    header = [s.name for s in frame_fields]
    more = frame.length - len(rows)
    if more:
        note = "; ".join(x for x in (f"{more} more row{'s' if more != 1 else ''}", note) if x)
    lengths = [min(max([len(header[c]), *[len(r[c]) for r in rows]]), 48) + 2
               for c in range(len(header))]
    total = sum(lengths)
    widths_px = [(right - left) * n / total for n in lengths]
    cells = [[fit_text(text, w - 4, 6) for text, w in zip(r, widths_px, strict=True)] for r in rows]
    heads = [fit_text(text, w - 4, 6) for text, w in zip(header, widths_px, strict=True)]
    note_px = 10.0 if note else 0.0
    height = min(row_px * (len(rows) + 1), top - bottom - note_px)
    ax = canvas.axes(left, top - height, right, top)
    ax.set_axis_off()
    table: Table = ax.table(cellText=cells or None, colLabels=heads, cellLoc="left",
                            colLoc="left", loc="upper left", bbox=(0, 0, 1, 1))
    table.auto_set_font_size(False)
    table.set_fontsize(6)
    for (r, c), cell in table.get_celld().items():
        cell.set_width(lengths[c] / total)
        cell.set_edgecolor("#d0d7de")
        cell.set_linewidth(0.4)
        cell.PAD = 0.02
        if r == 0:
            cell.set_facecolor("#f6f8fa")
            cell.get_text().set_weight("bold")
    if note:
        canvas.text(left, top - height - 7, note, fontsize=6, color=MUTED, ha="left",
                    va="center")
    return _table_data(table, len(header), more)


def _table_data(table: Table, ncols: int, more: int) -> dict[str, Any]:
    cells = table.get_celld()
    nrows = max(r for r, _ in cells) if cells else 0
    return {"header": [cells[(0, c)].get_text().get_text() for c in range(ncols)],
            "rows": [[cells[(r, c)].get_text().get_text() for c in range(ncols)]
                     for r in range(1, nrows + 1)],
            "more": more}


def draw_logs(canvas: Canvas, panel: Mapping[str, Any], shown: Sequence[Sequence[ShownField]],
              now_ms: int) -> dict[str, Any]:
    opts = panel.get("options") or {}
    rows: list[tuple[float, str]] = []
    for frame_fields in shown:
        t = first_of_type(frame_fields, FieldType.TIME)
        body = first_of_type(frame_fields, FieldType.STRING)
        if t is None:
            continue
        for i in range(t.frame.length):
            stamp = t.field.values[i]
            if body is not None:
                line = str(body.field.values[i] or "")
            else:
                line = " ".join(f"{s.name}={s.text(s.field.values[i], now_ms)}"
                                for s in frame_fields if s is not t)
            rows.append((float(stamp) if stamp is not None else -math.inf, line))
    if not rows:
        raise CannotDraw("the log frames have no time field (Grafana's logs need one)")
    left, bottom, right, top = canvas.box
    line_px = 10.5
    fit = max(int((top - bottom - 12) // line_px), 1)
    rows.sort()  # by time, lines of one instant by their text: whatever the frames' order
    newest = rows[-fit:]
    if opts.get("sortOrder", "Descending") == "Descending":
        newest.reverse()
    show_time = opts.get("showTime", True)
    lines: list[str] = []
    y = top - line_px / 2
    for stamp, line in newest:
        when = utc(stamp).strftime(TIME_FORMAT) + f".{int(stamp) % 1000:03d}" \
            if show_time and stamp > -math.inf else ""
        text = fit_text(f"{when}  {line}" if when else line, right - left, 6)
        canvas.text(left, y, text, fontsize=6, family="monospace", color=TEXT, ha="left",
                    va="center", gid="log-line")
        lines.append(text)
        y -= line_px
    if len(rows) > len(newest):
        canvas.text(left, bottom + 4, f"the newest {len(newest)} of {len(rows)} lines",
                    fontsize=6, color=MUTED, ha="left", va="center")
    shown_lines = [t.get_text() for t in canvas.figure.texts if t.get_gid() == "log-line"]
    return {"lines": shown_lines}

