"""The Grafana alert rules (issue 36): their provisioning file as Grafana reads it, the
thresholds they are documented with, and ``dashboards check`` running each rule's query
like a panel's, against the index mappings, so that a broken rule fails the check."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from pipeline.dashboards import alerts, overview, render
from pipeline.dashboards.check import Checker, PanelReport, Status, panels_of
from pipeline.dashboards.datasources import DATASOURCES
from pipeline.sink.names import Family
from pipeline.sink.templates import family_body

NOW_MS = 1_800_000_000_000
#: the generated YAML as Grafana reads it
PROVISIONED = yaml.safe_load(alerts.provisioning_yaml())


def _rules(prov: Mapping[str, Any] = PROVISIONED) -> dict[str, dict[str, Any]]:
    return {r["uid"]: r for g in prov["groups"] for r in g["rules"]}


def _data(rule: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {q["refId"]: q for q in rule["data"]}


# --------------------------------------------------------------------------- the file


def test_the_yaml_reads_as_the_rules_and_is_the_committed_file() -> None:
    assert PROVISIONED == alerts.provisioning()
    committed = render.GRAFANA_DIR / "provisioning/alerting/jobstream.yaml"
    assert committed.read_text() == alerts.provisioning_yaml(), "run jobstream dashboards build"
    assert PROVISIONED["apiVersion"] == 1
    (group,) = PROVISIONED["groups"]
    assert (group["name"], group["folder"], group["interval"]) == (
        alerts.GROUP, alerts.FOLDER, alerts.INTERVAL)


def test_each_rule_is_a_query_its_reduction_and_a_threshold_on_a_provisioned_source() -> None:
    uids = {ds.uid for ds in DATASOURCES}
    rules = _rules()
    assert set(rules) == {"jobstream-pending-long", "jobstream-nodes-drained",
                          "jobstream-gpus-idle"}
    for rule in rules.values():
        data = _data(rule)
        assert list(data) == ["A", "B", "C"] and rule["condition"] == "C"
        query, reduce, threshold = data["A"], data["B"], data["C"]
        assert query["datasourceUid"] in uids
        assert query["relativeTimeRange"]["from"] > 0
        # Grafana's Elasticsearch alerting wants a date histogram last: series per term
        assert query["model"]["bucketAggs"][-1]["type"] == "date_histogram"
        assert query["model"]["bucketAggs"][-1]["settings"]["min_doc_count"] == "1"
        assert (reduce["datasourceUid"], reduce["model"]["type"],
                reduce["model"]["expression"], reduce["model"]["reducer"]) == (
            "__expr__", "reduce", "A", "sum")
        assert (threshold["model"]["type"], threshold["model"]["expression"]) == (
            "threshold", "B")
        (condition,) = threshold["model"]["conditions"]
        assert condition["evaluator"]["type"] == "gt"
        # no data (nothing matches) is no alert; a query that fails is an error
        assert (rule["noDataState"], rule["execErrState"]) == ("OK", "Error")


def _above(rule: Mapping[str, Any]) -> float:
    return float(_data(rule)["C"]["model"]["conditions"][0]["evaluator"]["params"][0])


def test_thresholds_are_the_documented_constants() -> None:
    rules = _rules()
    pending, drained, idle = (rules["jobstream-pending-long"],
                              rules["jobstream-nodes-drained"], rules["jobstream-gpus-idle"])
    assert _above(pending) == alerts.PENDING_LONG_JOBS
    assert f"t_submit:<now-{alerts.PENDING_LONG_MIN}m" in _data(pending)["A"]["model"]["query"]
    assert [b["field"] for b in _data(pending)["A"]["model"]["bucketAggs"]] == [
        "cluster", "pending_reason", "t_submit"]
    assert _above(drained) == alerts.NODES_DRAINED_MAX
    assert drained["for"] == alerts.NODES_DRAINED_FOR
    assert _data(drained)["A"]["model"]["query"] == "state:(drained OR draining)"
    assert _above(idle) == alerts.GPU_IDLE_GPUS
    assert (f"usage_gpu_idle_since:<now-{alerts.GPU_IDLE_HELD_MIN}m"
            in _data(idle)["A"]["model"]["query"])
    assert _data(idle)["A"]["model"]["metrics"] == [{"id": "1", "type": "sum",
                                                    "field": "ngpus"}]


def test_each_rule_links_the_overview_panel_of_its_condition() -> None:
    titles = {p["id"]: p["title"] for p in panels_of(overview.build())}
    linked = {uid: titles[r["panelId"]] for uid, r in _rules().items()
              if r["dashboardUid"] == overview.UID}
    assert linked == {"jobstream-pending-long": "Longest-waiting pending jobs",
                      "jobstream-nodes-drained": "Drained, draining and down nodes now",
                      "jobstream-gpus-idle": "GPU jobs idle for $gpu_idle_min minutes, by user"}


# --------------------------------------------------------------------------- the check


_BUCKETS = frozenset({"terms", "date_histogram", "histogram", "filters"})


def _answer(aggs: Mapping[str, Any]) -> dict[str, Any]:
    """One bucket of one document in each bucket aggregation, 1 in each metric."""
    out: dict[str, Any] = {}
    for agg_id, spec in aggs.items():
        kind = next(k for k in spec if k != "aggs")
        if kind in _BUCKETS:
            out[agg_id] = {"buckets": [{"key": 1, "key_as_string": "1", "doc_count": 1,
                                        **_answer(spec.get("aggs") or {})}]}
        else:
            out[agg_id] = {"value": 1.0}
    return out


class _MappedElasticsearch:
    """Describes each alias by its index template's mapping, answers every search with
    ``response`` (by default one document in one bucket of each aggregation), and keeps
    the searches."""

    def __init__(self, response: Mapping[str, Any] | None = None) -> None:
        self.response = response
        self.searches: list[tuple[dict[str, Any], dict[str, Any]]] = []
        self.cluster = self

    def field_caps(self, *, index: str, fields: str) -> Any:
        caps: dict[str, Any] = {}

        def walk(props: Mapping[str, Any], prefix: str) -> None:
            for name, spec in props.items():
                caps[prefix + name] = {spec.get("type", "object"): {}}
                walk(spec.get("properties", {}), f"{prefix}{name}.")
                walk(spec.get("fields", {}), f"{prefix}{name}.")

        walk(family_body(Family(index))["mappings"]["properties"], "")
        return SimpleNamespace(body={"fields": caps})

    def options(self, **_: Any) -> _MappedElasticsearch:
        return self

    def health(self, **_: Any) -> None:
        return None

    def msearch(self, *, searches: list[dict[str, Any]], **_: Any) -> Any:
        pairs = list(zip(searches[::2], searches[1::2], strict=True))
        self.searches += pairs
        return SimpleNamespace(body={"responses": [
            dict(self.response) if self.response is not None else
            {"hits": {"total": {"value": 1}, "hits": []},
             "aggregations": _answer(body.get("aggs") or {})}
            for _, body in pairs]})


def _check(prov: Mapping[str, Any], es: _MappedElasticsearch | None = None
           ) -> dict[str, PanelReport]:
    checker = Checker(es or _MappedElasticsearch(), now_ms=NOW_MS)  # type: ignore[arg-type]
    return {r.title: r for r in checker.check_alert_rules(prov)}


def test_the_shipped_rules_pass_the_check_and_run_over_their_own_range() -> None:
    es = _MappedElasticsearch()
    reports = _check(PROVISIONED, es)
    assert set(reports) == {r["title"] for r in _rules().values()}
    for report in reports.values():
        assert report.status is Status.OK, report.detail
        assert report.dashboard == f"alert rules: {alerts.GROUP}"
        assert [t.ref_id for t in report.targets] == ["A", "B", "C"]
    by_index = {header["index"]: body for header, body in es.searches}
    assert set(by_index) == {"hpc-jobs", "hpc-nodes"}
    (pending,) = [body for header, body in es.searches
                  if "pending" in str(body["query"])]
    time_filter, query = pending["query"]["bool"]["filter"]
    assert time_filter["range"]["t_submit"]["gte"] == NOW_MS - 30 * 86_400_000
    assert time_filter["range"]["t_submit"]["lte"] == NOW_MS
    assert query["query_string"]["query"] == (
        f"state:pending AND t_submit:<now-{alerts.PENDING_LONG_MIN}m")
    histogram = pending["aggs"]["2"]["aggs"]["3"]["aggs"]["4"]["date_histogram"]
    assert (histogram["field"], histogram["fixed_interval"], histogram["min_doc_count"]) == (
        "t_submit", "1h", 1)


def test_a_rule_with_nothing_to_alert_on_is_empty_not_broken() -> None:
    nothing = {"hits": {"total": {"value": 0}, "hits": []},
               "aggregations": {"2": {"buckets": []}}}
    reports = _check(PROVISIONED, _MappedElasticsearch(nothing))
    assert {r.status for r in reports.values()} == {Status.EMPTY}


def _broken(edit: Any) -> PanelReport:
    prov = copy.deepcopy(PROVISIONED)
    rule = prov["groups"][0]["rules"][0]
    edit(rule, _data(rule))
    (report,) = [r for r in _check(prov).values() if r.title == rule["title"]]
    assert report.status is Status.BROKEN
    return report


def _set(path: tuple[Any, ...], value: Any) -> Any:
    def edit(rule: dict[str, Any], data: dict[str, dict[str, Any]]) -> None:
        node: Any = data
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return edit


@pytest.mark.parametrize(("edit", "reason", "detail"), [
    (_set(("A", "model", "query"), "state:pending AND t_submitted:<now-4h"),
     "unknown-field", "t_submitted"),
    (_set(("A", "model", "bucketAggs", 1, "field"), "pending_reasons"),
     "unknown-field", "pending_reasons"),
    (_set(("A", "datasourceUid"), "jobstream-no-such-source"),
     "bad-target", "unknown data source"),
    (_set(("B", "model", "expression"), "Z"), "bad-target", "unknown query Z"),
    (_set(("C", "model", "expression"), ""), "bad-target", "refers to no query"),
])
def test_a_broken_rule_query_or_expression_fails_the_check(edit: Any, reason: str,
                                                           detail: str) -> None:
    report = _broken(edit)
    (bad,) = [t for t in report.targets if t.status is Status.BROKEN]
    assert bad.reason == reason and detail in bad.detail, bad


def test_a_condition_naming_no_query_of_the_rule_fails_the_check() -> None:
    report = _broken(lambda rule, _: rule.update(condition="D"))
    assert report.detail == "condition: bad-target: condition 'D' is no query of the rule"


def test_an_error_elasticsearch_answers_fails_the_check() -> None:
    error = {"error": {"root_cause": [{"type": "illegal_argument_exception",
                                        "reason": "Text fields are not optimised"}],
                       "type": "search_phase_execution_exception", "reason": "all shards"},
             "status": 400}
    reports = _check(PROVISIONED, _MappedElasticsearch(error))
    assert {r.status for r in reports.values()} == {Status.BROKEN}
