"""The preview's pages (pipeline.dashboards.preview.page): every panel of the shipped
dashboards on its grid position with its status, unit and thresholds in text; rows as
headings; the banner; HTML escaped; an index linking the pages."""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from pipeline.dashboards import render
from pipeline.dashboards.check import panels_of
from pipeline.dashboards.preview.draw import WATERMARK
from pipeline.dashboards.preview.page import PageEntry, write_index, write_page


class Page(HTMLParser):
    """The page's panels (title, status, style, image) and headings, as a browser sees."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.panels: list[dict[str, Any]] = []
        self.rows: list[tuple[str, str]] = []
        self.links: list[tuple[str, str]] = []
        self._into: tuple[str, dict[str, Any]] | None = None
        self._stack: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        classes = a.get("class", "").split()
        if tag == "section" and "panel" in classes:
            self.panels.append({"class": classes, "style": a.get("style", ""), "title": "",
                                "status": "", "img": None, "meta": ""})
        elif tag == "h2" and "row" in classes:
            self.rows.append(("", a.get("style", "")))
            self._into = ("row", {})
        elif tag == "img" and self.panels:
            self.panels[-1]["img"] = a.get("src")
        elif tag == "a":
            self.links.append((a.get("href", ""), ""))
            self._into = ("link", {})
        elif tag == "span" and "title" in classes:
            self._into = ("title", {})
        elif tag == "span" and "status" in classes:
            self._into = ("status", {})
        elif tag == "div" and "meta" in classes:
            self._into = ("meta", {})
        self._stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if self._stack:
            self._stack.pop()
        if tag in ("h2", "a", "div") or (tag == "span" and self._into and
                                          self._into[0] in ("title", "status")):
            self._into = None

    def handle_data(self, data: str) -> None:
        if self._into is None:
            return
        kind = self._into[0]
        if kind == "row":
            title, style = self.rows[-1]
            self.rows[-1] = (title + data, style)
        elif kind == "link":
            href, text = self.links[-1]
            self.links[-1] = (href, text + data)
        else:
            self.panels[-1][kind] += data


def grid_style(panel: dict[str, Any]) -> str:
    g = panel["gridPos"]
    return f"grid-column: {g['x'] + 1} / span {g['w']}; grid-row: {g['y'] + 1} / span {g['h']}"


@pytest.mark.parametrize("board", render.dashboards() + render.metrics_dashboards(),
                         ids=lambda b: b["uid"])
def test_the_page_names_every_panel_of_a_shipped_dashboard(tmp_path: Path,
                                                           board: dict[str, Any]) -> None:
    panels = panels_of(board)
    entries = [PageEntry(p, "" if p["type"] == "row" else f"{p['id']}.png",
                         "" if p["type"] == "row" else f"empty: no documents for {p['id']}")
               for p in panels]
    page = Page(write_page(tmp_path, board, entries).read_text(encoding="utf-8"))
    drawn = [p for p in panels if p["type"] != "row"]
    assert [p["title"] for p in page.panels] == [p["title"] for p in drawn]
    assert [p["style"] for p in page.panels] == [grid_style(p) for p in drawn]
    assert [p["img"] for p in page.panels] == [f"{p['id']}.png" for p in drawn]
    assert [p["status"] for p in page.panels] == [f"empty: no documents for {p['id']}"
                                                  for p in drawn]
    assert all("status-empty" in p["class"] for p in page.panels)
    rows = [p for p in panels if p["type"] == "row"]
    assert [title for title, _ in page.rows] == [r["title"] for r in rows]
    assert [style for _, style in page.rows] == [
        f"grid-column: 1 / span 24; grid-row: {r['gridPos']['y'] + 1} / span 1" for r in rows]


def test_units_and_thresholds_are_listed_in_text(tmp_path: Path) -> None:
    board = next(b for b in render.dashboards() if b["uid"] == "jobstream-overview")
    gauge = next(p for p in panels_of(board) if p["title"] == "Oldest pending job by queue")
    page = Page(write_page(tmp_path, board, [PageEntry(gauge, "g.png", "ok")])
                .read_text(encoding="utf-8"))
    meta = next(p for p in page.panels if p["title"] == gauge["title"])["meta"]
    assert meta == ("unit s \N{MIDDLE DOT} thresholds (absolute): green base, "
                    "orange from 1 hour (3600), red from 4 hour (14400)")
    stat = {"type": "stat", "title": "n", "gridPos": {"x": 0, "y": 0, "w": 6, "h": 4},
            "fieldConfig": {"defaults": {"unit": "short"}, "overrides": []}}
    page = Page(write_page(tmp_path, {"title": "b", "panels": [stat]},
                           [PageEntry(stat, "n.png", "ok")]).read_text(encoding="utf-8"))
    assert page.panels[0]["meta"] == ("unit short \N{MIDDLE DOT} thresholds (absolute "
                                      "(Grafana's default)): green base, red from 80")


def test_statuses_mark_the_panels(tmp_path: Path) -> None:
    def p(i: int) -> dict[str, Any]:
        return {"type": "timeseries", "id": i, "title": f"p{i}",
                "gridPos": {"x": 0, "y": i * 8, "w": 12, "h": 8}}
    panels = [p(1), p(2), p(3), p(4)]
    entries = [PageEntry(panels[0], "1.png", "ok"),
               PageEntry(panels[1], "2.png", "empty: no documents"),
               PageEntry(panels[2], "3.png", "placeholder: Prometheus data source")]
    page = Page(write_page(tmp_path, {"title": "b", "panels": panels}, entries)
                .read_text(encoding="utf-8"))
    assert [next(c for c in x["class"] if c.startswith("status-")) for x in page.panels] == \
        ["status-ok", "status-empty", "status-placeholder", "status-placeholder"]
    assert page.panels[3]["status"] == "placeholder: no image was drawn"
    assert page.panels[3]["img"] is None


def test_all_text_is_escaped(tmp_path: Path) -> None:
    evil = '<script>alert("x")</script> & \'q\''
    panel = {"type": "table", "id": 1, "title": evil, "description": evil,
             "gridPos": {"x": 0, "y": 1, "w": 12, "h": 8},
             "fieldConfig": {"defaults": {"unit": evil}, "overrides": []}}
    row = {"type": "row", "title": evil, "gridPos": {"x": 0, "y": 0, "w": 24, "h": 1}}
    board = {"title": evil, "description": evil, "panels": [row, panel]}
    text = write_page(tmp_path, board, [PageEntry(row, "", ""),
                                        PageEntry(panel, 'a"b<c>.png', f"empty: {evil}")]
                      ).read_text(encoding="utf-8")
    assert "<script>" not in text and 'a"b' not in text
    assert html.escape(evil, quote=True) in text
    page = Page(text)
    assert page.panels[0]["title"] == evil and page.panels[0]["status"] == f"empty: {evil}"
    assert page.rows[0][0] == evil
    assert page.panels[0]["img"] == "a%22b%3Cc%3E.png"


def test_the_banner_says_it_is_a_preview(tmp_path: Path) -> None:
    text = write_page(tmp_path, {"title": "b", "panels": []}, []).read_text(encoding="utf-8")
    banner = re.search(r'<div class="banner">(.*?)</div>', text, re.S)
    assert banner is not None
    assert html.escape(WATERMARK) in banner.group(1) and "not Grafana" in html.unescape(
        banner.group(1))


def test_a_collapsed_rows_panels_follow_in_their_own_section(tmp_path: Path) -> None:
    inner = {"type": "stat", "id": 3, "title": "hidden stat",
             "gridPos": {"x": 6, "y": 10, "w": 6, "h": 4}}
    row = {"type": "row", "id": 2, "title": "More", "collapsed": True, "panels": [inner],
           "gridPos": {"x": 0, "y": 9, "w": 24, "h": 1}}
    top = {"type": "stat", "id": 1, "title": "top stat",
           "gridPos": {"x": 0, "y": 0, "w": 6, "h": 4}}
    board = {"title": "b", "panels": [top, row]}
    text = write_page(tmp_path, board, [PageEntry(top, "1.png", "ok"),
                                        PageEntry(inner, "3.png", "ok")]
                      ).read_text(encoding="utf-8")
    page = Page(text)
    assert [p["title"] for p in page.panels] == ["top stat", "hidden stat"]
    assert page.panels[1]["style"] == "grid-column: 7 / span 6; grid-row: 1 / span 4"
    assert "a collapsed row" in text


def test_the_index_links_each_dashboards_page(tmp_path: Path) -> None:
    pages = [("Overview <1>", tmp_path / "jobstream-overview" / "index.html"),
             ("Job", tmp_path / "jobstream-job" / "index.html")]
    index = Page(write_index(tmp_path, pages).read_text(encoding="utf-8"))
    assert index.links == [("jobstream-overview/index.html", "Overview <1>"),
                           ("jobstream-job/index.html", "Job")]
