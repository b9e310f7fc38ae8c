"""``jobstream dashboards check``: run every panel's queries against Elasticsearch, and
the Prometheus ones against a Prometheus when one is given.

For each panel of the dashboards, each Elasticsearch target is checked twice:

1. against the mapping: every field it uses must exist in its data source's index with a
   type that suits the use (:mod:`pipeline.dashboards.fields`);
2. by running it: the request Grafana would send (:mod:`pipeline.dashboards.grafana_query`),
   all targets of a panel in one ``_msearch`` as Grafana batches them, with template
   variables set to "All" (or their current value), unless given a value. A query
   variable's "All" without a custom all value stands for the values its own query finds
   (run first, in the dashboard's order of variables, as Grafana resolves a chain of
   them), written as Grafana writes them in a Lucene query: ``("a" OR "b")``.

A target is *broken* (Elasticsearch answered an error, or the mapping does not fit),
*empty* (no document, or no value in any bucket) or *ok*. Expression targets are checked
for the references they make. A panel is broken if any target is, empty if all its
Elasticsearch targets are, ok otherwise. Query variables are checked like panels.

A Prometheus target (:mod:`pipeline.dashboards.promql`) is *broken* when Prometheus refuses
or cannot evaluate its expression, *empty* when it returns no series, else *ok*. Without a
Prometheus those targets are left aside, as not this check's to run.

Grafana alert rules (:mod:`pipeline.dashboards.alerts`) are checked the same way: a rule's
queries have the query model of a panel's targets, so each rule is checked as a panel of
them, each query over its own relative time range; its reduce and threshold expressions
must name a query of the rule, and so must its condition.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from elasticsearch import ApiError, Elasticsearch, NotFoundError, TransportError

from pipeline.dashboards.answers import classify_error, error_of, has_data
from pipeline.dashboards.builder import EXPR_DS
from pipeline.dashboards.datasources import (
    DATASOURCES,
    MAX_CONCURRENT_SHARD_REQUESTS,
    PROMETHEUS,
    DataSource,
    by_uid,
)
from pipeline.dashboards.fields import check_use, field_types, field_uses
from pipeline.dashboards.grafana_query import (
    build_search,
    substitute,
    variable_values,
)
from pipeline.dashboards.grafana_time import (
    DEFAULT_MAX_DATA_POINTS,
    QueryError,
    TimeRange,
    auto_interval_ms,
    parse_duration_ms,
)
from pipeline.dashboards.promql import Prometheus, read_answer, request
from pipeline.runtime.errors import ServiceError

__all__ = ["Checker", "PanelAnswer", "PanelReport", "Status", "TargetReport", "panels_of",
           "summarize"]


class Status(StrEnum):
    OK = "ok"
    EMPTY = "empty"
    BROKEN = "broken"


@dataclass
class TargetReport:
    ref_id: str
    datasource: str
    status: Status
    #: short machine word: unknown-field, type-mismatch, unsupported-aggregation,
    #: missing-index, bad-target, es-error, promql-error; empty when fine
    reason: str = ""
    detail: str = ""
    #: documents the query matched (None when it did not run, or is not Elasticsearch's)
    hits: int | None = None
    #: series a Prometheus target returned (None when it did not run, or is not one)
    series: int | None = None


@dataclass
class PanelReport:
    dashboard: str
    panel_id: int | None
    title: str
    status: Status
    targets: list[TargetReport] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["status"] = self.status.value
        for t in out["targets"]:
            t["status"] = t["status"].value
        return out

    @property
    def detail(self) -> str:
        """One line for people: the first problem, else what was found."""
        for t in self.targets:
            if t.status is Status.BROKEN:
                return f"{t.ref_id}: {t.reason}: {t.detail}"
        hits = [t.hits for t in self.targets if t.hits is not None]
        series = [t.series for t in self.targets if t.series is not None]
        ran = len(hits) + len(series)
        if not ran:
            return "no queries"
        found = ([f"{sum(hits)} documents"] if hits else []) + \
            ([f"{sum(series)} series"] if series else [])
        return f"{ran} quer{'y' if ran == 1 else 'ies'}, {', '.join(found)}"


@dataclass
class _Planned:
    report: TargetReport
    target: Mapping[str, Any]
    header: dict[str, Any]
    body: dict[str, Any]
    #: Elasticsearch's answer, once run without error
    response: dict[str, Any] | None = None


@dataclass
class PanelAnswer:
    """A panel checked, with what it asked and what Elasticsearch answered (the preview
    draws from these)."""

    panel: Mapping[str, Any]
    report: PanelReport
    #: refId -> the target as sent, template variables substituted (expressions too)
    targets: dict[str, Mapping[str, Any]]
    #: refId -> the ``_msearch`` response item, for the targets that ran without error
    responses: dict[str, dict[str, Any]]
    #: the time range the panel's queries covered (its own ``timeFrom`` applied)
    time_range: TimeRange


_EXPR_REF = re.compile(r"\$\{?([A-Za-z][\w]*)\}?")

#: how long the check waits for a data source's index to start (see _field_types)
HEALTH_WAIT_S = 30


class Checker:
    """Checks dashboards against one Elasticsearch and index prefix.

    ``now_ms`` fixes "now" (tests); panels with a relative time override (``timeFrom``)
    end at it, as in Grafana. ``variables`` sets template variables by name, in every
    dashboard that has them, as a user would pick or type them (e.g. the job dashboard's
    ``job_id``, which matches no job by default). With ``prometheus``, the Prometheus
    targets run there; without, they are left aside.
    """

    def __init__(self, es: Elasticsearch, *, prefix: str = "",
                 sources: Sequence[DataSource] = DATASOURCES,
                 max_data_points: int = DEFAULT_MAX_DATA_POINTS,
                 now_ms: int | None = None,
                 variables: Mapping[str, str] | None = None,
                 prometheus: Prometheus | None = None) -> None:
        self.es = es
        self.prometheus = prometheus
        self._foreign_types = _FOREIGN_TYPES - {"prometheus"} if prometheus else _FOREIGN_TYPES
        self.variables = dict(variables or {})
        self.prefix = prefix
        self.sources = tuple(sources)
        self.max_data_points = max_data_points
        self.now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        self._types: dict[str, dict[str, frozenset[str]] | str] = {}

    # -- public

    def check(self, dashboards: Iterable[Mapping[str, Any]], time_range: TimeRange
              ) -> list[PanelReport]:
        reports: list[PanelReport] = []
        for board in dashboards:
            reports += self.check_dashboard(board, time_range)
        return reports

    def check_dashboard(self, board: Mapping[str, Any], time_range: TimeRange
                        ) -> list[PanelReport]:
        values = self._values(board, time_range)
        reports = [self._check_variable(_board_name(board), var, values, time_range)
                   for var in board.get("templating", {}).get("list", [])
                   if var.get("type") == "query" and not self._foreign(var.get("datasource"))]
        return reports + [a.report for a in self.answer_dashboard(board, time_range)]

    def answer_dashboard(self, board: Mapping[str, Any], time_range: TimeRange
                         ) -> list[PanelAnswer]:
        """Every panel with a target this check runs (Elasticsearch, and Prometheus when
        it has one), run; in the dashboard's order."""
        values = self._values(board, time_range)
        return [self._check_panel(_board_name(board), panel, values, time_range)
                for panel in panels_of(board)
                if any(not self._foreign(_source(t, panel)) for t in panel.get("targets") or [])]

    def _foreign(self, ref: Any) -> bool:
        return isinstance(ref, Mapping) and ref.get("type") in self._foreign_types

    def _values(self, board: Mapping[str, Any], time_range: TimeRange) -> dict[str, str]:
        """Each variable's value: as given, else "All" or the current value; the "All" of
        a query variable without a custom all value is its values, found in order so that
        a variable whose query names an earlier one sees that one's value."""
        options: dict[str, list[str]] = {}
        values = self._given(variable_values(board, options))
        for var in board.get("templating", {}).get("list", []):
            name = str(var.get("name") or "")
            if (var.get("type") == "query" and var.get("includeAll")
                    and not var.get("allValue") and name not in self.variables
                    and not self._foreign(var.get("datasource"))):
                options[name] = self._options(var, values, time_range)
                values = self._given(variable_values(board, options))
        return values

    def _given(self, values: dict[str, str]) -> dict[str, str]:
        values.update({k: v for k, v in self.variables.items() if k in values})
        return values

    def _options(self, var: Mapping[str, Any], values: Mapping[str, str],
                 time_range: TimeRange) -> list[str]:
        """The values a terms variable's query finds (none when it fails: its own report
        says why), as Grafana lists them."""
        item = self._variable_plan(var, values, time_range)
        if not isinstance(item, _Planned):
            return []
        self._run([item])
        if item.response is None:
            return []
        buckets = ((item.response.get("aggregations") or {}).get("2") or {}).get("buckets")
        return [str(b.get("key_as_string", b.get("key"))) for b in buckets or []]

    # -- panels

    def _check_panel(self, board: str, panel: Mapping[str, Any], values: Mapping[str, str],
                     time_range: TimeRange, ranges: Mapping[str, TimeRange] | None = None
                     ) -> PanelAnswer:
        """``ranges``: refId -> a time range of that target's own (an alert rule's
        queries each have theirs)."""
        span = self._panel_range(panel, time_range)
        refs = {str(t.get("refId")) for t in panel["targets"]}
        planned: list[_Planned] = []
        reports: list[TargetReport] = []
        targets: dict[str, Mapping[str, Any]] = {}
        for raw in panel["targets"]:
            if self._foreign(_source(raw, panel)):
                continue
            target = substitute(raw, values)
            targets[str(target.get("refId"))] = target
            uid = _uid(_source(target, panel))
            if uid == "__expr__":
                reports.append(_check_expression(target, refs))
                continue
            min_interval = str(panel.get("interval") or "")
            own = (ranges or {}).get(str(target.get("refId")), span)
            if _is_prometheus(_source(target, panel)):
                reports.append(self._check_promql(target, own, min_interval))
                continue
            item = self._plan(str(target.get("refId")), uid, target, own, min_interval)
            reports.append(item.report if isinstance(item, _Planned) else item)
            if isinstance(item, _Planned):
                planned.append(item)
        self._run(planned)
        report = PanelReport(board, panel.get("id"), str(panel.get("title") or ""),
                             _panel_status(reports), reports)
        responses = {p.report.ref_id: p.response for p in planned if p.response is not None}
        return PanelAnswer(panel, report, targets, responses, span)

    # -- alert rules

    def check_alert_rules(self, provisioning: Mapping[str, Any]) -> list[PanelReport]:
        """Every rule of an alert rule provisioning (``groups`` of ``rules``), each checked
        like a panel whose targets are its queries and expressions: the Elasticsearch and
        Prometheus queries run over their own ``relativeTimeRange`` ending at "now", the
        expressions must name queries of the rule, and so must its condition."""
        reports: list[PanelReport] = []
        for group in provisioning.get("groups") or []:
            board = f"alert rules: {group.get('name') or '?'}"
            for rule in group.get("rules") or []:
                reports.append(self._check_rule(board, rule))
        return reports

    def _check_rule(self, board: str, rule: Mapping[str, Any]) -> PanelReport:
        targets: list[dict[str, Any]] = []
        ranges: dict[str, TimeRange] = {}
        for query in rule.get("data") or []:
            ref = str(query.get("refId") or "")
            uid = str(query.get("datasourceUid") or "")
            targets.append({**(query.get("model") or {}), "refId": ref,
                            "datasource": _rule_source(uid, self.sources)})
            relative = query.get("relativeTimeRange") or {}
            ranges[ref] = TimeRange(self.now_ms - int(relative.get("from") or 0) * 1000,
                                    self.now_ms - int(relative.get("to") or 0) * 1000)
        title = str(rule.get("title") or rule.get("uid") or "?")
        panel = {"title": title, "targets": targets}
        answer = self._check_panel(board, panel, {}, TimeRange(self.now_ms, self.now_ms),
                                   ranges)
        reports = list(answer.report.targets)
        condition = str(rule.get("condition") or "")
        if condition not in ranges:
            reports.append(TargetReport("condition", "__expr__", Status.BROKEN, "bad-target",
                                        f"condition {condition!r} is no query of the rule"))
        return PanelReport(board, None, title, _panel_status(reports), reports)

    def _check_variable(self, board: str, var: Mapping[str, Any], values: Mapping[str, str],
                        time_range: TimeRange) -> PanelReport:
        """A terms variable as Grafana queries it: count by the field's values."""
        title = f"variable ${var.get('name')}"
        item = self._variable_plan(var, values, time_range)
        if isinstance(item, _Planned):
            self._run([item])
            report = item.report
        else:
            report = item
        return PanelReport(board, None, title, _panel_status([report]), [report])

    def _variable_plan(self, var: Mapping[str, Any], values: Mapping[str, str],
                       time_range: TimeRange) -> _Planned | TargetReport:
        uid = _uid(var.get("datasource") or {})
        query = var.get("query")
        if isinstance(query, Mapping):  # newer Grafana wraps it: {"query": "...", ...}
            query = query.get("query")
        try:
            definition = json.loads(str(query or "{}"))
        except ValueError:
            definition = {}
        if not isinstance(definition, dict):
            definition = {}
        if definition.get("find") != "terms" or not definition.get("field"):
            return TargetReport("var", uid, Status.BROKEN, "bad-target",
                                "not a terms variable query ({\"find\": \"terms\", ...})")
        target = substitute({
            "refId": "var", "query": definition.get("query", ""),
            "metrics": [{"id": "1", "type": "count"}],
            "bucketAggs": [{"id": "2", "type": "terms", "field": definition["field"],
                            "settings": {"size": str(definition.get("size", 500)),
                                         "order": "asc", "orderBy": "_key"}}],
        }, values)
        return self._plan("var", uid, target, time_range, "")

    def _panel_range(self, panel: Mapping[str, Any], time_range: TimeRange) -> TimeRange:
        relative = panel.get("timeFrom")
        if not relative:
            return time_range
        return TimeRange(self.now_ms - parse_duration_ms(str(relative)), self.now_ms)

    # -- one target

    def _check_promql(self, target: Mapping[str, Any], span: TimeRange,
                      min_interval: str) -> TargetReport:
        assert self.prometheus is not None  # a Prometheus target is foreign without one
        ref, uid = str(target.get("refId")), _uid(target.get("datasource") or {})
        if not str(target.get("expr") or "").strip():
            return TargetReport(ref, uid, Status.BROKEN, "bad-target", "no expression")
        try:
            path, params = request(target, span, min_interval=min_interval,
                                   max_data_points=self.max_data_points)
        except QueryError as exc:
            return TargetReport(ref, uid, Status.BROKEN, "bad-target", str(exc))
        answer = read_answer(self.prometheus.query(path, params))
        if answer.error:
            return TargetReport(ref, uid, Status.BROKEN, "promql-error", answer.error)
        if not answer.series:
            return TargetReport(ref, uid, Status.EMPTY, detail="no series", series=0)
        return TargetReport(ref, uid, Status.OK, series=answer.series)

    def _plan(self, ref: str, uid: str, target: Mapping[str, Any], time_range: TimeRange,
              min_interval: str) -> _Planned | TargetReport:
        ds = by_uid(uid, self.sources)
        if ds is None:
            return TargetReport(ref, uid, Status.BROKEN, "bad-target",
                                f"unknown data source uid {uid!r}")
        types = self._field_types(ds)
        if isinstance(types, str):
            return TargetReport(ref, uid, Status.BROKEN, "missing-index", types)
        for use in field_uses(target, ds.time_field):
            problem = check_use(use, types)
            if problem is not None:
                return TargetReport(ref, uid, Status.BROKEN, *problem)
        try:
            interval = auto_interval_ms(time_range.span_ms, min_interval or ds.time_interval,
                                        self.max_data_points)
            header, body = build_search(target, index=ds.index(self.prefix),
                                        time_field=ds.time_field, time_range=time_range,
                                        interval_ms=interval)
        except QueryError as exc:
            return TargetReport(ref, uid, Status.BROKEN, "bad-target", str(exc))
        return _Planned(TargetReport(ref, uid, Status.OK), target, header, body)

    def _field_types(self, ds: DataSource) -> dict[str, frozenset[str]] | str:
        index = ds.index(self.prefix)
        if index not in self._types:
            try:
                caps = self.es.field_caps(index=index, fields="*")
            except NotFoundError:
                self._types[index] = f"index or alias {index!r} does not exist"
            except ApiError as exc:  # authorization and the like: nothing can be checked
                raise ServiceError(f"Elasticsearch refused to describe {index!r}: "
                                   f"{exc}") from exc
            except TransportError as exc:
                raise ServiceError(f"Elasticsearch unreachable: {exc}") from exc
            else:
                self._types[index] = field_types(caps.body)
                # an index the sink has just created answers searches 503 until its
                # primaries start: the panels would be called broken for a second (one
                # that never starts times out, 408, and its panels say why)
                self.es.options(ignore_status=408).cluster.health(
                    index=index, wait_for_status="yellow", timeout=f"{HEALTH_WAIT_S}s")
        return self._types[index]

    def _run(self, planned: Sequence[_Planned]) -> None:
        if not planned:
            return
        searches: list[dict[str, Any]] = []
        for item in planned:
            searches += [item.header, item.body]
        try:
            answer = self.es.msearch(searches=searches,
                                     max_concurrent_shard_requests=MAX_CONCURRENT_SHARD_REQUESTS)
        except ApiError as exc:
            for item in planned:
                _broken(item.report, *classify_error(error_of(exc.body), str(exc)))
            return
        except TransportError as exc:
            raise ServiceError(f"Elasticsearch unreachable: {exc}") from exc
        for item, response in zip(planned, answer.body.get("responses", []), strict=True):
            error = response.get("error")
            if error:
                _broken(item.report, *classify_error(error, str(error)))
                continue
            item.response = response
            hits = (response.get("hits") or {}).get("total") or {}
            item.report.hits = int(hits.get("value", 0)) if isinstance(hits, dict) else int(hits)
            if not has_data(item.target, response):
                item.report.status = Status.EMPTY
                item.report.detail = "no documents" if not item.report.hits else \
                    "documents matched, but no value in any bucket"


# --------------------------------------------------------------------------- helpers


#: Data source types of other servers than Elasticsearch (the pipeline dashboard's
#: Prometheus, unless the checker is given one): not this check's to run, and not broken
#: for it.
_FOREIGN_TYPES = frozenset({"prometheus"})


def _source(target: Mapping[str, Any], panel: Mapping[str, Any]) -> Any:
    return target.get("datasource") or panel.get("datasource") or {}


def _is_prometheus(ref: Any) -> bool:
    return isinstance(ref, Mapping) and ref.get("type") == "prometheus"


def _uid(ref: Any) -> str:
    """A data source reference's uid (older dashboards name the data source by a string)."""
    if isinstance(ref, Mapping):
        return str(ref.get("uid") or ref.get("type") or "")
    return str(ref or "")


def _board_name(board: Mapping[str, Any]) -> str:
    return str(board.get("title") or board.get("uid") or "?")


def panels_of(board: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Every panel of a dashboard, rows' own panels after their row, in order."""
    out: list[Mapping[str, Any]] = []
    for panel in board.get("panels") or []:
        out.append(panel)
        out += panel.get("panels") or []  # collapsed rows keep their panels inside
    return out


def _rule_source(uid: str, sources: Sequence[DataSource]) -> dict[str, str]:
    """An alert query's ``datasourceUid`` as a panel target's data source reference."""
    if uid == EXPR_DS["uid"]:
        return dict(EXPR_DS)
    if uid == PROMETHEUS["uid"]:
        return dict(PROMETHEUS)
    ds = by_uid(uid, sources)
    # an unknown uid keeps no type: the check calls it an unknown data source
    return ds.ref() if ds is not None else {"uid": uid}


#: expressions whose ``expression`` is one query's refId (``A``, or ``$A``), not math
_ONE_REF_TYPES = frozenset({"reduce", "threshold", "resample"})


def _check_expression(target: Mapping[str, Any], refs: set[str]) -> TargetReport:
    ref = str(target.get("refId"))
    expression = str(target.get("expression") or "")
    if target.get("type") in _ONE_REF_TYPES:
        used = [expression.strip().removeprefix("$")] if expression.strip() else []
    else:
        used = _EXPR_REF.findall(expression)
    unknown = sorted(set(used) - refs)
    if not used or unknown:
        detail = f"unknown query {', '.join(unknown)}" if unknown else "refers to no query"
        return TargetReport(ref, "__expr__", Status.BROKEN, "bad-target",
                            f"expression {expression!r}: {detail}")
    return TargetReport(ref, "__expr__", Status.OK, detail=f"expression {expression}")


def _panel_status(reports: Sequence[TargetReport]) -> Status:
    if any(r.status is Status.BROKEN for r in reports):
        return Status.BROKEN
    queried = [r for r in reports if r.datasource != "__expr__"]
    if queried and all(r.status is Status.EMPTY for r in queried):
        return Status.EMPTY
    return Status.OK


def _broken(report: TargetReport, reason: str, detail: str) -> None:
    report.status, report.reason, report.detail = Status.BROKEN, reason, detail


def summarize(reports: Sequence[PanelReport]) -> dict[str, int]:
    counts = {s.value: 0 for s in Status}
    for r in reports:
        counts[r.status.value] += 1
    return counts
