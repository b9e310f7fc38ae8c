"""A small builder of Grafana dashboard JSON (plain dicts), Elasticsearch targets included.

It writes the same JSON model Grafana's dashboard editor saves (schema 39, Grafana 11+):
targets carry the Elasticsearch query-builder settings (``metrics``, ``bucketAggs``), as
strings where the editor stores strings, so a dashboard saved from the UI and one built
here look alike. :mod:`pipeline.dashboards.grafana_query` turns such targets into the
requests Grafana sends.

Ids inside a target (metrics and bucket aggregations share one id space) and panel ids
and grid positions are assigned here, so definitions stay short and never collide.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pipeline.dashboards.datasources import DataSource

__all__ = [
    "BARS",
    "EXPR_DS",
    "LEGEND",
    "MIXED_DS",
    "Bucket",
    "Grid",
    "Metric",
    "custom_var",
    "dashboard",
    "dashboard_link",
    "date_histogram",
    "dates",
    "drilldown_link",
    "es_target",
    "filters",
    "histogram",
    "math",
    "metric",
    "organize_columns",
    "organize_fields",
    "panel",
    "prom_target",
    "query_var",
    "row",
    "terms",
    "textbox_var",
    "units",
]

SCHEMA_VERSION = 39
#: The data source of server-side expressions (math over other queries of the panel).
EXPR_DS = {"type": "__expr__", "uid": "__expr__"}
#: A panel whose targets use different data sources.
MIXED_DS = {"type": "datasource", "uid": "-- Mixed --"}
#: The field config of a time series drawn as stacked bars (counts per interval).
BARS = {"custom": {"drawStyle": "bars", "stacking": {"mode": "normal", "group": "A"},
                   "fillOpacity": 80, "lineWidth": 1}}
#: The options of a time series with its legend listed below and a tooltip of every series.
LEGEND = {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
          "tooltip": {"mode": "multi", "sort": "desc"}}


@dataclass(frozen=True)
class Metric:
    """A metric of the query builder; ``settings`` as the editor stores them."""

    type: str
    field: str = ""
    settings: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    hide: bool = False


@dataclass(frozen=True)
class Bucket:
    """A bucket aggregation (group by). ``order_by`` may be an ``int``: the index of the
    target's metric to order by, resolved to that metric's id."""

    type: str
    field: str = ""
    settings: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    order_by: int | None = None


def metric(type_: str, field_: str = "", *, hide: bool = False, **settings: Any) -> Metric:
    return Metric(type_, field_, settings, hide)


def terms(field_: str, *, size: int = 10, order: str = "desc",
          order_by: str | int = "_count", min_doc_count: int = 1, missing: str = "") -> Bucket:
    """``missing``: the bucket of documents without the field (else they drop out)."""
    settings = {"size": str(size), "order": order, "min_doc_count": str(min_doc_count)}
    if missing:
        settings["missing"] = missing
    if isinstance(order_by, int):
        return Bucket("terms", field_, settings, order_by)
    return Bucket("terms", field_, {**settings, "orderBy": order_by})


def date_histogram(field_: str, interval: str = "auto", *, min_doc_count: int = 0) -> Bucket:
    return Bucket("date_histogram", field_,
                  {"interval": interval, "min_doc_count": str(min_doc_count), "trimEdges": "0"})


def histogram(field_: str, interval: float, *, min_doc_count: int = 1) -> Bucket:
    return Bucket("histogram", field_,
                  {"interval": f"{interval:g}", "min_doc_count": str(min_doc_count)})


def filters(*queries: tuple[str, str]) -> Bucket:
    """``(lucene query, label)`` pairs."""
    return Bucket("filters", "", {"filters": [{"query": q, "label": label}
                                              for q, label in queries]})


def es_target(ds: DataSource, ref: str, *, query: str = "", metrics: Sequence[Metric],
              buckets: Sequence[Bucket] = (), alias: str = "", hide: bool = False
              ) -> dict[str, Any]:
    """An Elasticsearch query-builder target: metrics get ids 1..m, buckets m+1.."""
    metric_ids = [str(i + 1) for i in range(len(metrics))]
    out_metrics: list[dict[str, Any]] = []
    for mid, m in zip(metric_ids, metrics, strict=True):
        item: dict[str, Any] = {"id": mid, "type": m.type}
        if m.field:
            item["field"] = m.field
        if m.settings:
            item["settings"] = dict(m.settings)
        if m.hide:
            item["hide"] = True
        out_metrics.append(item)
    out_buckets: list[dict[str, Any]] = []
    for i, b in enumerate(buckets):
        settings = dict(b.settings)
        if b.order_by is not None:
            settings["orderBy"] = metric_ids[b.order_by]
        item = {"id": str(len(metrics) + i + 1), "type": b.type}
        if b.field:
            item["field"] = b.field
        item["settings"] = settings
        out_buckets.append(item)
    target: dict[str, Any] = {
        "refId": ref, "datasource": ds.ref(), "query": query, "alias": alias,
        "metrics": out_metrics, "bucketAggs": out_buckets, "timeField": ds.time_field,
    }
    if hide:
        target["hide"] = True
    return target


def prom_target(ds: Mapping[str, str], ref: str, expr: str, *, legend: str = "",
                instant: bool = False) -> dict[str, Any]:
    """A PromQL target, as the editor's code mode saves it."""
    return {"refId": ref, "datasource": dict(ds), "expr": expr, "legendFormat": legend,
            "editorMode": "code", "range": not instant, "instant": instant}


def math(ref: str, expression: str, *, hide: bool = False) -> dict[str, Any]:
    """A server-side math expression over other targets (``$A / $B * 100``)."""
    target: dict[str, Any] = {"refId": ref, "datasource": dict(EXPR_DS), "type": "math",
                              "expression": expression}
    if hide:
        target["hide"] = True
    return target


def panel(type_: str, title: str, targets: Sequence[Mapping[str, Any]], *, w: int, h: int,
          description: str = "", unit: str = "", options: Mapping[str, Any] | None = None,
          field_config: Mapping[str, Any] | None = None,
          overrides: Sequence[Mapping[str, Any]] = (),
          transformations: Sequence[Mapping[str, Any]] = (), interval: str = "",
          time_from: str = "") -> dict[str, Any]:
    """A panel (id and grid position come from :class:`Grid`). The panel's data source is
    its targets' one, or Mixed when they differ."""
    sources = {json.dumps(t["datasource"], sort_keys=True) for t in targets
               if t["datasource"] != EXPR_DS}
    datasource = json.loads(sources.pop()) if len(sources) == 1 else dict(MIXED_DS)
    defaults: dict[str, Any] = dict(field_config or {})
    if unit:
        defaults["unit"] = unit
    out: dict[str, Any] = {
        "type": type_, "title": title, "description": description, "datasource": datasource,
        "gridPos": {"h": h, "w": w, "x": 0, "y": 0},
        "targets": [dict(t) for t in targets],
        "fieldConfig": {"defaults": defaults, "overrides": [dict(o) for o in overrides]},
        "options": dict(options or {}),
    }
    if transformations:
        out["transformations"] = [dict(t) for t in transformations]
    if interval:
        out["interval"] = interval
    if time_from:
        out["timeFrom"] = time_from
    return out


def units(unit: str, *names: str) -> list[dict[str, Any]]:
    """Overrides giving table columns ``names`` a unit of their own."""
    return [{"matcher": {"id": "byName", "options": name},
             "properties": [{"id": "unit", "value": unit}]} for name in names]


def dates(*names: str) -> list[dict[str, Any]]:
    """Overrides showing epoch-millisecond columns (metrics of date fields) as dates."""
    return units("dateTimeAsIso", *names)


def drilldown_link(column: str, title: str, uid: str) -> dict[str, Any]:
    """An override making the cells of ``column`` links to the dashboard ``uid``, with
    the row's cluster as ``var-cluster``, the cell as ``var-<column>`` and the time range."""
    return {
        "matcher": {"id": "byName", "options": column},
        "properties": [{"id": "links", "value": [{
            "title": title,
            "url": f"/d/{uid}/{uid}?var-cluster=${{__data.fields.cluster}}"
                   f"&var-{column}=${{__value.raw}}&${{__url_time_range}}",
        }]}],
    }


def organize_columns(columns: Sequence[tuple[str, str]], *, sort: str, desc: bool
                     ) -> list[dict[str, Any]]:
    """The transformations of a terms table: its columns ``(as Grafana names them, as
    shown)`` in that order, renamed, and its rows sorted on the column shown as ``sort``.
    (Grafana names a metric's column after the metric, ``Max t_end``.)"""
    return [{"id": "organize", "options": {
        "renameByName": {column: name for column, name in columns if column != name},
        "indexByName": {column: i for i, (column, _) in enumerate(columns)}}},
        {"id": "sortBy", "options": {"sort": [{"field": sort, "desc": desc}]}}]


def organize_fields(names: Sequence[str], *, sort: str,
                    rename: Mapping[str, str] | None = None, desc: bool = False
                    ) -> list[dict[str, Any]]:
    """The transformations of a raw-data table: only the fields ``names``, in that order,
    renamed by ``rename``, the rows sorted on ``sort`` ascending (oldest first; ``desc``:
    newest first)."""
    options: dict[str, Any] = {"indexByName": {name: i for i, name in enumerate(names)},
                               "includeByName": dict.fromkeys(names, True)}
    if rename:
        options["renameByName"] = dict(rename)
    return [{"id": "organize", "options": options},
            {"id": "sortBy", "options": {"sort": [{"field": sort, "desc": desc}]}}]


def row(title: str) -> dict[str, Any]:
    return {"type": "row", "title": title, "collapsed": False, "panels": [],
            "gridPos": {"h": 1, "w": 24, "x": 0, "y": 0}}


class Grid:
    """Places panels left to right on Grafana's 24-column grid, wrapping to a new line
    below the tallest panel of the line; numbers the panels 1, 2, ..."""

    WIDTH = 24

    def __init__(self) -> None:
        self.panels: list[dict[str, Any]] = []
        self._x = 0
        self._y = 0
        self._line_h = 0

    def add(self, *panels: dict[str, Any]) -> Grid:
        for p in panels:
            pos = p["gridPos"]
            if pos["w"] > self.WIDTH:
                raise ValueError(f"panel {p['title']!r} is wider than the grid")
            if p["type"] == "row" or self._x + pos["w"] > self.WIDTH:
                self._newline()
            pos["x"], pos["y"] = self._x, self._y
            p["id"] = len(self.panels) + 1
            self.panels.append(p)
            self._x += pos["w"]
            self._line_h = max(self._line_h, pos["h"])
            if p["type"] == "row":
                self._newline()
        return self

    def _newline(self) -> None:
        if self._x:
            self._y += self._line_h
        self._x, self._line_h = 0, 0


def query_var(name: str, label: str, ds: DataSource, field_: str, *, query: str = "",
              all_value: str = "*", description: str = "", hidden: bool = False
              ) -> dict[str, Any]:
    """A multi-value variable listing the values of a keyword field (terms query).

    ``all_value``: what "All" is written as; empty for none, and then Grafana writes the
    values the query found (in a Lucene query ``("a" OR "b")``, ``__empty__`` for none).
    ``hidden``: not shown in the dashboard's header (Grafana's hide 2), for a variable
    that only carries values from one query to a panel's."""
    find: dict[str, Any] = {"find": "terms", "field": field_, "size": 1000}
    if query:
        find["query"] = query
    definition = json.dumps(find)
    return {
        "name": name, "label": label, "description": description, "type": "query",
        "datasource": ds.ref(), "query": definition, "definition": definition,
        "refresh": 2, "sort": 1, "multi": True, "includeAll": True, "allValue": all_value,
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "options": [], "hide": 2 if hidden else 0, "regex": "", "skipUrlSync": False,
    }


def custom_var(name: str, label: str, values: Iterable[str], default: str, *,
               description: str = "") -> dict[str, Any]:
    values = list(values)
    return {
        "name": name, "label": label, "description": description, "type": "custom",
        "query": ",".join(values), "multi": False, "includeAll": False,
        "current": {"selected": True, "text": default, "value": default},
        "options": [{"selected": v == default, "text": v, "value": v} for v in values],
        "hide": 0, "skipUrlSync": False,
    }


def textbox_var(name: str, label: str, default: str, *, description: str = ""
                ) -> dict[str, Any]:
    return {
        "name": name, "label": label, "description": description, "type": "textbox",
        "query": default, "current": {"selected": False, "text": default, "value": default},
        "options": [{"selected": True, "text": default, "value": default}],
        "hide": 0, "skipUrlSync": False,
    }


def dashboard_link(title: str, uid: str, *, icon: str, include_vars: bool, tooltip: str = ""
                   ) -> dict[str, Any]:
    """A link of a dashboard's header to the dashboard ``uid``, keeping the time range
    (and the variables: ``include_vars``). The uid stands for the URL's slug, which
    Grafana does not check."""
    return {"title": title, "type": "link", "icon": icon, "url": f"/d/{uid}/{uid}",
            "keepTime": True, "includeVars": include_vars, "tooltip": tooltip}


def dashboard(uid: str, title: str, *, description: str, panels: Sequence[dict[str, Any]],
              variables: Sequence[dict[str, Any]], tags: Sequence[str] = ("jobstream",),
              time_from: str = "now-24h", refresh: str = "1m",
              links: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    return {
        "uid": uid, "title": title, "description": description, "tags": list(tags),
        "editable": True, "graphTooltip": 1, "timezone": "", "refresh": refresh,
        "schemaVersion": SCHEMA_VERSION, "version": 1, "fiscalYearStartMonth": 0,
        "liveNow": False, "weekStart": "",
        "time": {"from": time_from, "to": "now"}, "timepicker": {},
        "templating": {"list": [dict(v) for v in variables]},
        "annotations": {"list": []},
        "links": [dict(link) for link in links],
        "panels": list(panels),
    }
