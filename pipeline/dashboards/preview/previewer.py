"""``jobstream dashboards preview``: every panel drawn from the answers to Grafana's queries.

For each dashboard, the :class:`~pipeline.dashboards.check.Checker` runs each panel's
targets exactly as ``dashboards check`` does (the requests Grafana's own fixtures pin
down); the answers become data frames the way Grafana's Elasticsearch data source makes
them (:mod:`.es_frames`), server-side math expressions are evaluated over them
(:mod:`.expressions`), hidden targets are dropped as Grafana drops them after the
expressions, the panel's transformations are applied (:mod:`.transforms`), and the panel is
drawn (:mod:`.draw`). What cannot be drawn faithfully -- a panel on another data source, a
query Elasticsearch refused, an expression, transformation or panel type the preview does
not know -- becomes a labelled placeholder, counted, never left out. The pages
(:mod:`.page`) lay the images out on each dashboard's grid, and :mod:`.sheet` puts a whole
dashboard into one picture (the README's).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.dashboards.check import Checker, PanelAnswer, Status, panels_of
from pipeline.dashboards.grafana_time import TimeRange
from pipeline.dashboards.preview import draw, es_frames, expressions, page, sheet, transforms
from pipeline.dashboards.preview.frames import Frame

__all__ = ["BoardPreview", "PanelPreview", "Previewer"]

#: data source types the preview does not query (Prometheus: no server in the local stack)
_OTHER_SOURCES = {"prometheus": "Prometheus"}


@dataclass
class PanelPreview:
    title: str
    image: str
    #: ok, empty or placeholder
    status: str
    #: why it is empty, or what the placeholder stands for
    reason: str = ""
    #: Elasticsearch refused one of its queries (the command's exit status says so)
    refused: bool = False


@dataclass
class BoardPreview:
    title: str
    uid: str
    page: Path
    panels: list[PanelPreview] = field(default_factory=list)
    sheet: Path | None = None

    def count(self, status: str) -> int:
        return sum(1 for p in self.panels if p.status == status)


class Previewer:
    """Draws dashboards from one Elasticsearch, through ``checker``, into ``out``."""

    def __init__(self, checker: Checker, out: Path) -> None:
        self.checker = checker
        self.out = out

    def preview(self, boards: Sequence[Mapping[str, Any]], time_range: TimeRange
                ) -> list[BoardPreview]:
        self.out.mkdir(parents=True, exist_ok=True)
        done = [self.preview_board(board, time_range) for board in boards]
        page.write_index(self.out, [(b.title, b.page) for b in done])
        return done

    def preview_board(self, board: Mapping[str, Any], time_range: TimeRange) -> BoardPreview:
        uid = str(board.get("uid") or _slug(str(board.get("title") or "dashboard")))
        folder = self.out / uid
        folder.mkdir(parents=True, exist_ok=True)
        answers = {id(a.panel): a for a in self.checker.answer_dashboard(board, time_range)}
        result = BoardPreview(str(board.get("title") or uid), uid, folder / "index.html")
        entries: list[page.PageEntry] = []
        drawings: list[tuple[Mapping[str, Any], Path]] = []
        for panel in panels_of(board):
            if panel.get("type") == "row":
                entries.append(page.PageEntry(panel, "", ""))
                continue
            drawing = self.draw_panel(panel, answers.get(id(panel)))
            name = f"{panel.get('id', len(entries))}-{_slug(str(panel.get('title') or ''))}.png"
            drawing.save(folder / name)
            status, reason = _status(drawing)
            refused = any(t.status is Status.BROKEN for t in answers[id(panel)].report.targets
                          ) if id(panel) in answers else False
            result.panels.append(PanelPreview(str(panel.get("title") or ""), name, status,
                                              reason, refused))
            entries.append(page.PageEntry(panel, name, f"{status}: {reason}" if reason
                                          else status))
            drawings.append((panel, folder / name))
        page.write_page(folder, board, entries)
        result.sheet = sheet.compose(board, drawings, folder / "dashboard.png")
        return result

    def draw_panel(self, panel: Mapping[str, Any], answer: PanelAnswer | None
                   ) -> draw.Drawing:
        """One panel from its answer (None: it has no Elasticsearch target)."""
        if answer is None:
            return draw.draw_panel(panel, [], placeholder=_no_answer(panel))
        broken = [t for t in answer.report.targets if t.status is Status.BROKEN]
        if broken:
            first = broken[0]
            return draw.draw_panel(panel, [], placeholder=(
                f"query {first.ref_id} failed: {first.reason}: {first.detail}"))
        try:
            frames = panel_frames(answer)
            frames = transforms.apply(panel.get("transformations") or [], frames)
        except (es_frames.FrameError, expressions.ExpressionError,
                transforms.TransformError) as exc:
            return draw.draw_panel(panel, [], placeholder=str(exc))
        empty = "" if answer.report.status is not Status.EMPTY else \
            f"nothing in the time range ({answer.report.detail})"
        span = (answer.time_range.from_ms, answer.time_range.to_ms)
        return draw.draw_panel(panel, frames, empty_reason=empty or _empty_reason(frames),
                               now_ms=self.checker.now_ms, time_range=span)


def panel_frames(answer: PanelAnswer) -> list[Frame]:
    """The frames a panel receives: each visible target's, expressions' results included,
    in the order of the panel's targets (as Grafana passes them)."""
    by_ref: dict[str, list[Frame]] = {}
    for ref, target in answer.targets.items():
        response = answer.responses.get(ref)
        if response is not None:
            by_ref[ref] = es_frames.frames_of(target, response)
    for ref, target in answer.targets.items():
        if target.get("type") == "math":
            by_ref[ref] = expressions.evaluate(target, by_ref)
    out: list[Frame] = []
    for ref, target in answer.targets.items():
        if not target.get("hide"):
            out += by_ref.get(ref, [])
    return out


def _no_answer(panel: Mapping[str, Any]) -> str:
    kinds = {str((t.get("datasource") or panel.get("datasource") or {}).get("type", "?"))
             for t in panel.get("targets") or [] if isinstance(t, Mapping)}
    other = sorted(_OTHER_SOURCES.get(k, k) for k in kinds)
    if other:
        return (f"{', '.join(other)} data source: the preview queries only Elasticsearch "
                "(Grafana draws this panel from that server)")
    return "panel has no query"


def _empty_reason(frames: Sequence[Frame]) -> str:
    return "" if any(f.length for f in frames) else "the queries returned no rows"


def _status(drawing: draw.Drawing) -> tuple[str, str]:
    if drawing.placeholder:
        return "placeholder", drawing.placeholder
    if drawing.empty_reason is not None:
        return "empty", drawing.empty_reason
    return "ok", ""


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60] or "panel"
