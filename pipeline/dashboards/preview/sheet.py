"""One picture of a whole dashboard: its panels' images placed on Grafana's grid.

Grafana's grid is 24 columns wide, one height unit 30 px with 8 px between panels; rows
(``type: row``) take one unit. The panels' PNGs are placed with matplotlib alone (the
library that drew them), so the README's picture needs nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.image import imread

from pipeline.dashboards.preview.canvas import DPI, GRID_COLUMN_PX, GRID_ROW_PX

__all__ = ["compose"]



def compose(board: Mapping[str, Any], images: Sequence[tuple[Mapping[str, Any], Path]],
            out: Path) -> Path:
    """Write ``out``: ``images`` (panel, its PNG) at their panels' grid positions."""
    rows = [p for p in board.get("panels") or [] if p.get("type") == "row"]
    placed = [(_pos(p), path) for p, path in images] + [(_pos(p), None) for p in rows]
    bottom = max((y + h for (_, y, _, h), _ in placed), default=1)
    width_px, height_px = 24 * GRID_COLUMN_PX, bottom * GRID_ROW_PX + 40
    fig = Figure(figsize=(width_px / DPI, height_px / DPI), dpi=DPI)
    FigureCanvasAgg(fig)
    fig.text(0.01, 1 - 14 / height_px, f"{board.get('title', '')} -- preview by jobstream, "
             "not Grafana's rendering", fontsize=11, weight="bold", va="center")
    for (x, y, w, h), path in placed:
        left, top = x / 24, 1 - (40 + y * GRID_ROW_PX) / height_px
        height = h * GRID_ROW_PX / height_px
        ax = fig.add_axes((left, top - height, w / 24, height))
        ax.set_axis_off()
        if path is None:
            title = next((str(r.get("title", "")) for r in rows if _pos(r) == (x, y, w, h)), "")
            ax.text(0, 0.5, title, fontsize=12, weight="bold", va="center")
            continue
        ax.imshow(imread(path), aspect="auto", interpolation="antialiased")
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=DPI)
    return out


def _pos(panel: Mapping[str, Any]) -> tuple[int, int, int, int]:
    grid = panel.get("gridPos") or {}
    return (int(grid.get("x", 0)), int(grid.get("y", 0)), int(grid.get("w", 24)),
            int(grid.get("h", 1)))
