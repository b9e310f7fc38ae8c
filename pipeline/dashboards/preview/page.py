"""The preview's HTML: one page per dashboard with its panels' images on the dashboard's
grid, and an index of the pages.

A page lays the panels out as Grafana does: a CSS grid of 24 columns and rows of 30 px with
8 px between panels, each panel at its ``gridPos``; ``row`` panels become section
headings, and the panels of a collapsed row follow in a section of their own (Grafana hides
them until the row is opened). Every panel says in text what the image shows -- its unit,
its thresholds -- and its status: drawn, empty (and why), or a placeholder (and what is
missing). A banner says the page is a preview by jobstream, not Grafana. All text is
HTML-escaped.
"""

from __future__ import annotations

import html
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from pipeline.dashboards.preview.draw import WATERMARK
from pipeline.dashboards.preview.fieldconfig import color_of
from pipeline.dashboards.preview.units import format_value

__all__ = ["PageEntry", "write_index", "write_page"]

#: Grafana's grid: 24 columns 50 px wide with the gaps (1200 px), rows 30 px, gaps 8 px
_COLUMNS = 24
_ROW_PX = 30
_GAP_PX = 8
_WIDTH_PX = 1200

#: panel types that colour their values by the thresholds even when the panel sets none
_THRESHOLD_COLOURED = ("stat", "bargauge", "gauge")

_CSS = f"""
body {{ font-family: system-ui, -apple-system, "Segoe UI", sans-serif; color: #24292e;
       background: #f6f8fa; margin: 0; padding: 16px; }}
.banner {{ background: #fff8c5; border: 1px solid #d4a72c; padding: 8px 12px;
          margin-bottom: 12px; width: {_WIDTH_PX - 26}px; }}
header, section.collapsed > h2, .missing {{ width: {_WIDTH_PX}px; }}
h1 {{ font-size: 20px; margin: 4px 0; }}
.desc, .counts {{ margin: 2px 0; color: #57606a; font-size: 13px; }}
.grid {{ display: grid; grid-template-columns: repeat({_COLUMNS}, 1fr);
        grid-auto-rows: {_ROW_PX}px; gap: {_GAP_PX}px; width: {_WIDTH_PX}px;
        margin: 12px 0 24px 0; }}
.grid > h2.row {{ margin: 0; font-size: 16px; align-self: end;
                 border-bottom: 1px solid #d0d7de; }}
.panel {{ background: white; border: 1px solid #d0d7de; display: flex;
         flex-direction: column; overflow: hidden; min-width: 0; }}
.panel .head {{ display: flex; gap: 6px; align-items: baseline; padding: 2px 6px;
               font-size: 12px; }}
.panel .title {{ font-weight: 600; overflow: hidden; text-overflow: ellipsis;
                white-space: nowrap; flex: 1 1 auto; }}
.panel .status {{ font-size: 11px; padding: 0 4px; border-radius: 3px; white-space: nowrap;
                 overflow: hidden; text-overflow: ellipsis; max-width: 60%; }}
.status-ok .status {{ background: #dafbe1; }}
.status-empty .status {{ background: #eaeef2; }}
.status-placeholder .status {{ background: #fff1e5; }}
.panel img {{ flex: 1 1 auto; min-height: 0; width: 100%; object-fit: contain; }}
.panel .meta {{ font-size: 11px; color: #57606a; padding: 1px 6px; white-space: nowrap;
               overflow: hidden; text-overflow: ellipsis; }}
.swatch {{ display: inline-block; width: 8px; height: 8px; border-radius: 2px;
          margin-right: 2px; }}
ul.boards li {{ margin: 6px 0; font-size: 15px; }}
"""


@dataclass(frozen=True)
class PageEntry:
    """A panel on a page: its image (a file name next to the page; "" for rows and panels
    without one) and its status ("ok", "empty: why", "placeholder: what is missing")."""

    panel: Mapping[str, Any]
    image_name: str
    status_text: str


def write_page(out_dir: Path, board: Mapping[str, Any], entries: Sequence[PageEntry]) -> Path:
    """Write ``out_dir/index.html``: ``board``'s panels on its grid, as ``entries`` say."""
    out_dir.mkdir(parents=True, exist_ok=True)
    by_identity = {id(e.panel): e for e in entries}
    by_id = {e.panel.get("id"): e for e in entries if e.panel.get("id") is not None}
    used: set[int] = set()

    def entry_of(panel: Mapping[str, Any]) -> PageEntry | None:
        entry = by_identity.get(id(panel)) or by_id.get(panel.get("id"))
        if entry is not None:
            used.add(id(entry))
        return entry

    title = str(board.get("title") or board.get("uid") or "dashboard")
    top = list(board.get("panels") or [])
    parts = [_banner(), _header(board, entries)]
    parts.append(_grid(top, entry_of, 0))
    for row in top:
        inner = list(row.get("panels") or []) if row.get("type") == "row" else []
        if inner:
            first_y = min(_pos(p)[1] for p in inner)
            parts.append(f'<section class="collapsed"><h2>{_e(str(row.get("title") or ""))} '
                         "<small>(a collapsed row: Grafana shows these panels when the row "
                         "is opened)</small></h2>")
            parts.append(_grid(inner, entry_of, first_y))
            parts.append("</section>")
    others = [e for e in entries if id(e) not in used and e.panel.get("type") != "row"]
    if others:
        parts.append('<section class="missing"><h2>Panels not on the dashboard\'s grid</h2>'
                     '<div class="grid">')
        parts += [_panel(e.panel, e, (i % 2 * 12, i // 2 * 8, 12, 8), 0)
                  for i, e in enumerate(others)]
        parts.append("</div></section>")
    path = out_dir / "index.html"
    path.write_text(_document(f"{title} \N{EM DASH} preview by jobstream", parts),
                    encoding="utf-8")
    return path


def write_index(out_dir: Path, pages: Sequence[tuple[str, Path]]) -> Path:
    """Write ``out_dir/index.html`` linking each (dashboard title, its page)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    items = []
    for title, page in pages:
        href = Path(os.path.relpath(page, out_dir)).as_posix()
        items.append(f'<li><a href="{_e(quote(href))}">{_e(title)}</a></li>')
    body = [_banner(), "<header><h1>Dashboards</h1></header>",
            '<ul class="boards">' + "".join(items) + "</ul>"]
    path = out_dir / "index.html"
    path.write_text(_document("Dashboards \N{EM DASH} preview by jobstream", body),
                    encoding="utf-8")
    return path


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def _document(title: str, body: Sequence[str]) -> str:
    return ("<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{_e(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
            + "\n".join(body) + "\n</body>\n</html>\n")


def _banner() -> str:
    return ('<div class="banner"><strong>' + _e(WATERMARK) + ".</strong> "
            + _e("Every panel was drawn by jobstream with matplotlib from the answers to "
                 "the panel's own queries; what the preview cannot draw faithfully is a "
                 "labelled placeholder saying what is missing. Grafana draws the real "
                 "dashboard.") + "</div>")


def _header(board: Mapping[str, Any], entries: Sequence[PageEntry]) -> str:
    title = str(board.get("title") or board.get("uid") or "dashboard")
    counts: dict[str, int] = {}
    for e in entries:
        if e.panel.get("type") != "row":
            kind = _status_kind(e.status_text)
            counts[kind] = counts.get(kind, 0) + 1
    summary = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items()))
    desc = str(board.get("description") or "")
    parts = [f"<header><h1>{_e(title)}</h1>"]
    if desc:
        parts.append(f'<p class="desc">{_e(desc)}</p>')
    if summary:
        parts.append(f'<p class="counts">Panels: {_e(summary)}. '
                     '<a href="../index.html">All dashboards</a></p>')
    parts.append("</header>")
    return "".join(parts)


def _grid(panels: Sequence[Mapping[str, Any]],
          entry_of: Callable[[Mapping[str, Any]], PageEntry | None], y0: int) -> str:
    """The panels at their grid positions, rows ``y0`` and below."""
    cells = ['<div class="grid">']
    for panel in panels:
        x, y, w, h = _pos(panel)
        if panel.get("type") == "row":
            entry_of(panel)
            cells.append(f'<h2 class="row" style="grid-column: 1 / span {_COLUMNS}; '
                         f'grid-row: {y - y0 + 1} / span 1">'
                         f'{_e(str(panel.get("title") or ""))}</h2>')
            continue
        cells.append(_panel(panel, entry_of(panel), (x, y, w, h), y0))
    cells.append("</div>")
    return "\n".join(cells)


def _panel(panel: Mapping[str, Any], entry: PageEntry | None,
           pos: tuple[int, int, int, int], y0: int) -> str:
    x, y, w, h = pos
    title = str(panel.get("title") or "(untitled panel)")
    status = entry.status_text if entry is not None else "placeholder: no image was drawn"
    kind = _status_kind(status)
    style = f"grid-column: {x + 1} / span {w}; grid-row: {y - y0 + 1} / span {h}"
    tip = str(panel.get("description") or "")
    out = [f'<section class="panel status-{_e(kind)}" style="{style}"'
           + (f' title="{_e(tip)}"' if tip else "") + ">",
           f'<div class="head"><span class="title">{_e(title)}</span>'
           f'<span class="status" title="{_e(status)}">{_e(status)}</span></div>']
    if entry is not None and entry.image_name:
        out.append(f'<img src="{_e(quote(entry.image_name))}" '
                   f'alt="{_e(title)}: {_e(status)}" loading="lazy">')
    meta = _meta(panel)
    if meta:
        out.append(f'<div class="meta" title="{_e(_plain(panel))}">{meta}</div>')
    out.append("</section>")
    return "".join(out)


def _status_kind(status: str) -> str:
    kind = status.split(":", 1)[0].strip().lower()
    return kind if kind in ("ok", "empty", "placeholder") else "placeholder"


def _units(panel: Mapping[str, Any]) -> list[str]:
    fc = panel.get("fieldConfig") or {}
    units = []
    unit = (fc.get("defaults") or {}).get("unit")
    if unit:
        units.append(str(unit))
    for override in fc.get("overrides") or []:
        for prop in override.get("properties") or []:
            if prop.get("id") == "unit" and prop.get("value"):
                who = (override.get("matcher") or {}).get("options")
                units.append(f"{who}: {prop['value']}")
    return units


def _steps(panel: Mapping[str, Any]) -> tuple[str, list[tuple[str, Any]], bool]:
    """(mode, [(colour, from)], Grafana's default?) of the panel's thresholds."""
    defaults = (panel.get("fieldConfig") or {}).get("defaults") or {}
    th = defaults.get("thresholds")
    implicit = False
    if not th:
        if panel.get("type") not in _THRESHOLD_COLOURED:
            return "", [], False
        th = {"mode": "absolute", "steps": [{"color": "green", "value": None},
                                             {"color": "red", "value": 80}]}
        implicit = True
    steps = sorted(th.get("steps") or [], key=lambda s: -1e300 if s.get("value") is None
                   else float(s["value"]))
    return str(th.get("mode") or "absolute"), [(str(s.get("color")), s.get("value"))
                                               for s in steps], implicit


def _threshold_words(panel: Mapping[str, Any]) -> list[tuple[str, str]]:
    """[(colour name, "from X")] in words, X in the panel's unit."""
    mode, steps, _ = _steps(panel)
    unit = ((panel.get("fieldConfig") or {}).get("defaults") or {}).get("unit")
    words = []
    for color, value in steps:
        if value is None:
            words.append((color, "base"))
        elif mode == "percentage":
            words.append((color, f"from {value}%"))
        else:
            shown = format_value(value, unit) if unit else format_value(value)
            raw = format_value(value)
            words.append((color, f"from {shown}" + (f" ({raw})" if shown != raw else "")))
    return words


def _meta(panel: Mapping[str, Any]) -> str:
    parts = []
    units = _units(panel)
    if units:
        parts.append("unit " + _e(", ".join(units)))
    mode, steps, implicit = _steps(panel)
    if steps:
        shown = ", ".join(f'<span class="swatch" style="background: {_e(color_of(c))}">'
                          f"</span>{_e(c)} {_e(w)}" for c, w in _threshold_words(panel))
        note = " (Grafana's default)" if implicit else ""
        parts.append(f"thresholds ({_e(mode)}{_e(note)}): {shown}")
    return " \N{MIDDLE DOT} ".join(parts)


def _plain(panel: Mapping[str, Any]) -> str:
    """The meta line without markup (the tooltip of a line cut short)."""
    parts = []
    units = _units(panel)
    if units:
        parts.append("unit " + ", ".join(units))
    mode, steps, implicit = _steps(panel)
    if steps:
        parts.append(f"thresholds ({mode}{' default' if implicit else ''}): "
                     + ", ".join(f"{c} {w}" for c, w in _threshold_words(panel)))
    return " \N{MIDDLE DOT} ".join(parts)


def _pos(panel: Mapping[str, Any]) -> tuple[int, int, int, int]:
    grid = panel.get("gridPos") or {}
    w = min(max(int(grid.get("w") or 12), 1), _COLUMNS)
    x = min(max(int(grid.get("x") or 0), 0), _COLUMNS - w)
    return x, max(int(grid.get("y") or 0), 0), w, max(int(grid.get("h") or 8), 1)
