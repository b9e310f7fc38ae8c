"""The node dashboards (issue 36 part 5): the overview's Nodes row and its failed jobs on
the nodes drained or down now, the node page, the job page's nodes now, and the check's
"All" of a query variable without a custom value (the job page's $job_nodes, the
overview's $bad_nodes), written as Grafana writes it."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import pytest
from workload_documents import documents_at

from pipeline.dashboards import job, node, overview
from pipeline.dashboards.check import Checker, PanelAnswer, PanelReport, Status, TargetReport
from pipeline.dashboards.datasources import (
    JOBS_BY_END,
    JOBS_BY_SUBMIT,
    NODE_EVENTS,
    NODES,
    SNAPSHOTS,
)
from pipeline.dashboards.grafana_query import lucene_values, substitute, variable_values
from pipeline.dashboards.grafana_time import TimeRange
from pipeline.dashboards.overview_nodes import NODES_NOW
from pipeline.tooling.workload import WorkloadSpec

OVERVIEW = overview.build()
NODE = node.build()
JOB = job.build()
NOW_MS = 1_800_000_000_000
SPAN = TimeRange(NOW_MS - 86_400_000, NOW_MS)
FAILED_ON_BAD_NODES = "Failed jobs on nodes drained or down now"


def _panel(board: Mapping[str, Any], title: str) -> dict[str, Any]:
    (found,) = [p for p in board["panels"] if p["title"] == title]
    return found


def _row(board: Mapping[str, Any], title: str) -> list[dict[str, Any]]:
    titles = [p["title"] for p in board["panels"]]
    start = titles.index(title) + 1
    end = next((i for i in range(start, len(titles)) if board["panels"][i]["type"] == "row"),
               len(titles))
    return board["panels"][start:end]


# --------------------------------------------------------------------------- the overview


def test_the_nodes_row_reads_the_node_documents_now_and_begun_in_the_range() -> None:
    panels = {p["title"]: p for p in _row(OVERVIEW, "Nodes (node documents)")}
    assert set(panels) == {"Drained, draining and down nodes now", FAILED_ON_BAD_NODES,
                           "Nodes by state", "Node-hours in drain so far, by reason",
                           "Drains and downs begun in the range"}
    del panels[FAILED_ON_BAD_NODES]  # job documents: its own tests below
    for title, p in panels.items():
        sources = {t["datasource"]["uid"] for t in p["targets"] if t.get("type") != "math"}
        assert sources == {NODES.uid}, title
        assert all("(cluster:$cluster)" in t["query"] for t in p["targets"]
                   if t.get("type") != "math"), title
    # "now": every node, whatever the age of its state (the time field is since)
    for title in ("Drained, draining and down nodes now", "Nodes by state",
                  "Node-hours in drain so far, by reason"):
        assert panels[title]["timeFrom"] == NODES_NOW
    begun = panels["Drains and downs begun in the range"]
    assert "timeFrom" not in begun
    (target,) = begun["targets"]
    assert target["query"].startswith("state:(drained OR draining OR down) AND ")
    assert [(b["type"], b["field"]) for b in target["bucketAggs"]] == [
        ("terms", "state"), ("date_histogram", "since")]
    # what a current-state document cannot give is said, not faked
    assert "node events" in begun["description"]
    assert "per week" in panels["Node-hours in drain so far, by reason"]["description"]


def test_the_drained_and_down_table_says_why_who_and_since_when_and_links_the_node() -> None:
    p = _panel(OVERVIEW, "Drained, draining and down nodes now")
    (target,) = p["targets"]
    assert target["query"] == "state:(drained OR draining OR down) AND (cluster:$cluster)"
    assert [(m["type"], m["field"]) for m in target["metrics"]] == [
        ("min", "since"), ("max", "reason_at")]
    assert [(b["field"], b["settings"].get("missing")) for b in target["bucketAggs"]] == [
        ("cluster", None), ("node", None), ("state", "-"), ("reason", "-"),
        ("reason_by", "-")]
    # one row per node: every field after it a single term
    assert [b["settings"]["size"] for b in target["bucketAggs"][2:]] == ["1", "1", "1"]
    (link,) = [o for o in p["fieldConfig"]["overrides"] if o["matcher"]["options"] == "node"]
    url = link["properties"][0]["value"][0]["url"]
    assert url.startswith(f"/d/{node.UID}/") and "var-node=${__value.raw}" in url
    assert "var-cluster=${__data.fields.cluster}" in url


def test_the_failed_jobs_on_bad_nodes_are_those_ended_in_the_range_on_their_hosts() -> None:
    p = _panel(OVERVIEW, FAILED_ON_BAD_NODES)
    (target,) = p["targets"]
    # by end time, in the range: no timeFrom, unlike the node tables' "now"
    assert target["datasource"]["uid"] == JOBS_BY_END.uid and "timeFrom" not in p
    assert target["query"] == (
        f"nodelist:($bad_nodes) AND {overview.FAILED} AND (cluster:$cluster) AND "
        "(queue:$queue) AND (bank:$bank) AND (user:$user)")
    assert [m["type"] for m in target["metrics"]] == ["raw_data"]
    organize, sort = p["transformations"]
    assert list(organize["options"]["indexByName"]) == [
        "t_end", "cluster", "job_id", "user", "result", "failed_node", "nodelist"]
    assert sort["options"]["sort"] == [{"field": "t_end", "desc": True}]
    (link,) = [o for o in p["fieldConfig"]["overrides"] if o["matcher"]["options"] == "job_id"]
    url = link["properties"][0]["value"][0]["url"]
    assert url.startswith(f"/d/{job.UID}/") and "var-job_id=${__value.raw}" in url
    # beside the drained nodes, whose reasons it points to, and to the job page's
    drained = _panel(OVERVIEW, "Drained, draining and down nodes now")
    assert p["gridPos"]["y"] == drained["gridPos"]["y"]
    assert "table beside" in p["description"] and "'Its nodes now'" in p["description"]


def test_bad_nodes_are_a_hidden_variable_of_the_nodes_down_now_without_a_custom_all() -> None:
    variables = [v["name"] for v in OVERVIEW["templating"]["list"]]
    # after the cluster, whose value its query takes (the check resolves them in order)
    assert variables.index("bad_nodes") > variables.index("cluster")
    (var,) = [v for v in OVERVIEW["templating"]["list"] if v["name"] == "bad_nodes"]
    assert var["type"] == "query" and var["hide"] == 2
    assert var["includeAll"] and not var["allValue"]
    assert var["datasource"]["uid"] == NODES.uid
    find = json.loads(var["query"])
    assert find["field"] == "node"
    assert find["query"] == "state:(drained OR draining OR down) AND (cluster:$cluster)"


@pytest.mark.parametrize(("hosts", "written"), [
    (["slurm-b-c001", "gpu 2"], '(("slurm\\-b\\-c001" OR "gpu\\ 2"))'),
    # no node drained: a value no host has, so no job, not every failed job
    ([], "(__empty__)"),
])
def test_the_failed_jobs_query_names_the_bad_nodes_as_grafana_writes_them(
        hosts: list[str], written: str) -> None:
    es = _FakeElasticsearch(hosts, field="node")
    checker = Checker(es, now_ms=NOW_MS)  # type: ignore[arg-type]
    answers = checker.answer_dashboard(OVERVIEW, SPAN)
    (var_body,) = [b for b in es.bodies
                   if ((b.get("aggs") or {}).get("2") or {}).get("terms", {}).get("field")
                   == "node"]
    (since, query) = var_body["query"]["bool"]["filter"]
    assert query["query_string"]["query"] == (
        "state:(drained OR draining OR down) AND (cluster:* OR *:*)")
    assert set(since["range"]) == {NODES.time_field}  # nodes drained since in the range
    sent = _sent_query(answers, FAILED_ON_BAD_NODES)
    assert sent.startswith(f"nodelist:{written} AND {overview.FAILED} AND ")
    reports = {r.title: r for r in checker.check_dashboard(OVERVIEW, SPAN)}
    assert reports["variable $bad_nodes"].status is (Status.OK if hosts else Status.EMPTY)


def test_node_hours_in_drain_add_drained_and_draining_of_the_same_nodes() -> None:
    p = _panel(OVERVIEW, "Node-hours in drain so far, by reason")
    a, b, c = p["targets"]
    assert (a["hide"], b["hide"]) == (True, True)
    assert [m["field"] for m in a["metrics"]] == ["state_s.drained"]
    assert [m["field"] for m in b["metrics"]] == ["state_s.draining"]
    assert (a["query"], a["bucketAggs"]) == (b["query"], b["bucketAggs"])
    assert c == {"refId": "C", "datasource": {"type": "__expr__", "uid": "__expr__"},
                 "type": "math", "expression": "($A + $B) / 3600"}


def test_the_node_events_row_counts_each_drain_once_and_nodes_by_state_over_time() -> None:
    panels = {p["title"]: p for p in _row(OVERVIEW, "Nodes (node events)")}
    assert set(panels) == {"Drains and downs per week, by reason", "Node states over time"}
    (drains,) = panels["Drains and downs per week, by reason"]["targets"]
    assert drains["datasource"]["uid"] == NODE_EVENTS.uid and NODE_EVENTS.time_field == (
        "timestamp")
    assert drains["query"] == "episode:* AND (cluster:$cluster)"
    # a unique count of episodes: the polls of one Slurm drain are one drain
    assert [(m["type"], m["field"]) for m in drains["metrics"]] == [("cardinality", "episode")]
    assert [(b["type"], b["field"], b["settings"].get("interval"), b["settings"].get(
        "missing")) for b in drains["bucketAggs"]] == [
        ("terms", "reason", None, "-"), ("date_histogram", "timestamp", "1w", None)]
    (states,) = panels["Node states over time"]["targets"]
    assert states["query"] == "state:* AND (cluster:$cluster)"
    assert [(m["type"], m["field"]) for m in states["metrics"]] == [("cardinality", "node")]
    assert [(b["type"], b["field"]) for b in states["bucketAggs"]] == [
        ("terms", "state"), ("date_histogram", "timestamp")]
    # no text says the index is missing any more
    texts = " ".join(p.get("description", "") for p in OVERVIEW["panels"] + NODE["panels"])
    assert "an index of them" not in texts and "need the node events" not in texts


def test_the_state_timeline_shows_the_nodes_events_oldest_first_with_state_and_reason(
        ) -> None:
    p = _panel(NODE, "State timeline")
    (t,) = p["targets"]
    assert [m["type"] for m in t["metrics"]] == ["raw_data"]
    organize, sort = p["transformations"]
    assert list(organize["options"]["indexByName"])[:5] == [
        "timestamp", "event", "state", "reason", "reason_by"]
    assert sort["options"]["sort"] == [{"field": "timestamp", "desc": False}]


# --------------------------------------------------------------------------- the node page


def test_the_node_page_names_one_node_as_a_phrase_and_finds_its_jobs_by_node_list() -> None:
    assert {v["name"]: v["type"] for v in NODE["templating"]["list"]} == {
        "cluster": "query", "node": "textbox"}
    (var,) = [v for v in NODE["templating"]["list"] if v["name"] == "node"]
    assert var["current"]["value"] == ""  # no node by default, as no job on the job page
    sources = {}
    for p in NODE["panels"]:
        (t,) = p["targets"]
        sources[p["title"]] = t["datasource"]["uid"]
        assert p["fieldConfig"]["defaults"]["noValue"].startswith("No node")
        if t["datasource"]["uid"] == NODES.uid:
            assert t["query"] == 'node:"$node" AND (cluster:$cluster)'
            assert p["timeFrom"] == NODES_NOW
        elif t["datasource"]["uid"] == NODE_EVENTS.uid:  # its events in the range
            assert t["query"] == 'node:"$node" AND (cluster:$cluster)'
            assert "timeFrom" not in p
        else:
            assert t["query"].endswith('nodelist:"$node" AND (cluster:$cluster)')
    assert sources == {"State now": NODES.uid, "Time in each state": NODES.uid,
                       "State timeline": NODE_EVENTS.uid,
                       "Its jobs": JOBS_BY_SUBMIT.uid, "Its failed jobs": JOBS_BY_END.uid}
    failed = _panel(NODE, "Its failed jobs")["targets"][0]["query"]
    assert failed.startswith(overview.FAILED + " AND ")
    states = _panel(NODE, "Time in each state")["targets"][0]["metrics"]
    assert {m["field"] for m in states} == {f"state_s.{s}" for s in (
        "up", "unresponsive", "draining", "drained", "down", "off", "unknown")}


def test_job_documents_name_each_host_so_the_node_phrase_matches() -> None:
    # The node page matches nodelist:"<host>": the job documents must list the hosts one
    # by one, never a hostlist ("c[001-004]"). (Beyond 16 hosts the fold's state keeps
    # them as runs and its documents still list each: test_fold_bounds.py.)
    now = 1_795_000_000.0
    docs = [d for d in documents_at(WorkloadSpec(seed=11, jobs=240, rate=0.3,
                                                 start=now - 900), now) if d["nodelist"]]
    assert any(len(d["nodelist"]) > 4 for d in docs)
    for d in docs:
        assert d["nnodes"] in (None, len(d["nodelist"]))
        for host in d["nodelist"]:
            assert isinstance(host, str) and not set(host) & set("[],"), host


# --------------------------------------------------------------------------- the job page


def test_the_job_pages_nodes_come_from_its_node_list_without_a_custom_all_value() -> None:
    (var,) = [v for v in JOB["templating"]["list"] if v["name"] == "job_nodes"]
    assert var["type"] == "query" and var["includeAll"] and not var["allValue"]
    assert var["datasource"]["uid"] == JOBS_BY_SUBMIT.uid
    find = json.loads(var["query"])
    assert find["field"] == "nodelist"
    assert find["query"] == job.JOB
    (target,) = _panel(JOB, "Its nodes now")["targets"]
    assert target["datasource"]["uid"] == NODES.uid
    assert target["query"] == "node:$job_nodes AND (cluster:$cluster)"


# --------------------------------------------------------------------------- the check


class _FakeElasticsearch:
    """Answers the check: every field a keyword, a terms variable on ``field`` the given
    hosts, anything else nothing; keeps the searches it was sent."""

    def __init__(self, hosts: Sequence[str], field: str = "nodelist") -> None:
        self.hosts = list(hosts)
        self.field = field
        self.bodies: list[dict[str, Any]] = []
        self.cluster = self

    def field_caps(self, *, index: str, fields: str) -> Any:
        names = ("cluster", "job_id", "job_id_f58", "nodelist", "node", "state", "reason",
                 "reason_by", "event", "usage.node", "result")
        caps: dict[str, Any] = {n: {"keyword": {}} for n in names}
        for n in ("since", "reason_at", "t_submit", "@timestamp"):
            caps[n] = {"date": {}}
        for n in ("usage.cpu_now_pct", "usage.mem_mb", "usage.gpu_now_pct", "wait_s",
                  "eligible_wait_s", "run_s", "prolog_s", "epilog_s"):
            caps[n] = {"double": {}}
        return SimpleNamespace(body={"fields": caps})

    def options(self, **_: Any) -> _FakeElasticsearch:
        return self

    def health(self, **_: Any) -> None:
        return None

    def msearch(self, *, searches: list[dict[str, Any]], **_: Any) -> Any:
        responses = []
        for body in searches[1::2]:
            self.bodies.append(body)
            terms = ((body.get("aggs") or {}).get("2") or {}).get("terms") or {}
            keys = self.hosts if terms.get("field") == self.field else []
            responses.append({
                "hits": {"total": {"value": len(keys)}, "hits": []},
                "aggregations": {"2": {"buckets": [{"key": k, "doc_count": 1}
                                                   for k in keys]}}})
        return SimpleNamespace(body={"responses": responses})


def _sent_query(answers: list[PanelAnswer], title: str) -> str:
    (answer,) = [a for a in answers if a.panel["title"] == title]
    return str(answer.targets["A"]["query"])


@pytest.mark.parametrize(("hosts", "written"), [
    (["slurm-b-c001", "gpu 2"], '("slurm\\-b\\-c001" OR "gpu\\ 2")'),
    (["n1"], '("n1")'),
    ([], "__empty__"),
])
def test_all_without_a_custom_value_is_the_values_the_variable_finds(
        hosts: list[str], written: str) -> None:
    es = _FakeElasticsearch(hosts)
    checker = Checker(es, now_ms=NOW_MS, variables={"job_id": "42"})  # type: ignore[arg-type]
    answers = checker.answer_dashboard(JOB, SPAN)
    # the variable's own query ran with the job id and the cluster's (custom) All
    (var_body,) = [b for b in es.bodies
                   if ((b.get("aggs") or {}).get("2") or {}).get("terms", {}).get("field")
                   == "nodelist"]
    (_, query) = var_body["query"]["bool"]["filter"]
    assert query["query_string"]["query"] == (
        '(job_id:"42" OR job_id_f58:"42") AND (cluster:* OR *:*)')
    assert _sent_query(answers, "Its nodes now") == f"node:{written} AND (cluster:* OR *:*)"
    # a report of the variable too, from the same query
    reports = {r.title: r for r in checker.check_dashboard(JOB, SPAN)}
    assert reports["variable $job_nodes"].status is (Status.OK if hosts else Status.EMPTY)


def test_a_value_given_for_the_variable_is_used_as_given() -> None:
    es = _FakeElasticsearch(["n1", "n2"])
    checker = Checker(es, now_ms=NOW_MS,  # type: ignore[arg-type]
                      variables={"job_id": "42", "job_nodes": '"n2"'})
    answers = checker.answer_dashboard(JOB, SPAN)
    assert _sent_query(answers, "Its nodes now") == 'node:"n2" AND (cluster:* OR *:*)'


def test_variable_values_without_the_server_keep_a_custom_all_and_write_given_values() -> None:
    values = variable_values(JOB)
    assert values["cluster"] == "* OR *:*"  # a custom all value, written as it is
    assert values["job_nodes"] == "*"  # no values known: every node
    assert variable_values(JOB, {"job_nodes": ["a:b", "c"]})["job_nodes"] == (
        '("a\\:b" OR "c")')
    assert lucene_values(['x"y', "p\\q"]) == '("x\\"y" OR "p\\\\q")'
    assert substitute("node:$job_nodes", variable_values(JOB, {"job_nodes": []})) == (
        "node:__empty__")


# --------------------------------------------------------------------------- the preview


def _answer(panel: dict[str, Any], responses: dict[str, dict[str, Any]]) -> PanelAnswer:
    report = PanelReport("b", panel.get("id"), panel["title"], Status.OK,
                         [TargetReport(ref, "x", Status.OK) for ref in responses])
    targets = {t["refId"]: substitute(t, variable_values(OVERVIEW)) for t in panel["targets"]}
    return PanelAnswer(panel, report, targets, responses, SPAN)


def test_the_preview_draws_node_hours_as_drained_plus_draining_by_reason(tmp_path: Any) -> None:
    from pipeline.dashboards.preview.previewer import Previewer

    p = _panel(OVERVIEW, "Node-hours in drain so far, by reason")
    assert p["targets"][0]["bucketAggs"][0]["id"] == "2"
    answer = _answer(p, {
        "A": {"aggregations": {"2": {"buckets": [
            {"key": "GPU ECC errors", "doc_count": 1, "1": {"value": 0.0}},
            {"key": "maintenance", "doc_count": 1, "1": {"value": 7200.0}}]}},
            "hits": {"total": {"value": 2}, "hits": []}},
        "B": {"aggregations": {"2": {"buckets": [
            {"key": "GPU ECC errors", "doc_count": 1, "1": {"value": 1800.0}},
            {"key": "maintenance", "doc_count": 1, "1": {"value": 0.0}}]}},
            "hits": {"total": {"value": 2}, "hits": []}},
    })
    checker = Checker(_FakeElasticsearch([]), now_ms=NOW_MS)  # type: ignore[arg-type]
    drawing = Previewer(checker, tmp_path).draw_panel(p, answer)
    assert drawing.data == pytest.approx({"GPU ECC errors": 0.5, "maintenance": 2.0})


# ------------------------------------------------------------ the snapshots' node rows

NODE_HOURS = {"Node-hours lost to drains per week, by reason": "(drained OR draining)",
              "Node-hours down per week, by reason": "down"}


def test_the_node_rows_row_sums_node_seconds_per_week_by_reason_in_node_hours() -> None:
    panels = {p["title"]: p for p in _row(OVERVIEW, "Nodes (node rows of the snapshots)")}
    assert set(panels) == set(NODE_HOURS)
    for title, states in NODE_HOURS.items():
        p = panels[title]
        a, b = p["targets"]
        assert a["datasource"]["uid"] == SNAPSHOTS.uid and a["hide"] is True
        assert a["query"] == (f"_exists_:node_state AND node_state:{states} "
                              "AND (cluster:$cluster)")  # nodes have no queue
        assert [(m["type"], m["field"]) for m in a["metrics"]] == [("sum", "node_s")]
        assert [(bk["type"], bk["field"], bk["settings"].get("interval"),
                 bk["settings"].get("missing")) for bk in a["bucketAggs"]] == [
            ("terms", "node_reason", None, "-"), ("date_histogram", "timestamp", "1w", None)]
        assert b == {"refId": "B", "datasource": {"type": "__expr__", "uid": "__expr__"},
                     "type": "math", "expression": "$A / 3600"}
        defaults = p["fieldConfig"]["defaults"]
        assert defaults["unit"] == "suffix: node-h"
        assert defaults["custom"]["drawStyle"] == "bars"
        assert defaults["displayName"] == "${__field.labels.node_reason}"
        assert "sampled" in p["description"].lower()


def test_the_queue_panels_leave_the_node_rows_out() -> None:
    """Node rows have an empty queue, which "All" (queue:*) matches: every snapshot query
    but the instants' count (N: an instant with nodes and no job has nothing pending)
    excludes them, or each by-queue panel would draw a queue "" of zeros."""
    seen = 0
    for p in OVERVIEW["panels"]:
        for t in p.get("targets", ()):
            if t.get("datasource", {}).get("uid") != SNAPSHOTS.uid or p["title"] in NODE_HOURS:
                continue
            seen += 1
            assert t["refId"] == "N" or t["query"].endswith(
                "AND NOT _exists_:node_state"), (p["title"], t["refId"])
    assert seen > 10


def test_the_preview_draws_node_hours_per_week_by_reason(tmp_path: Any) -> None:
    from pipeline.dashboards.preview.previewer import Previewer

    p = _panel(OVERVIEW, "Node-hours lost to drains per week, by reason")
    terms_id, hist_id = (bk["id"] for bk in p["targets"][0]["bucketAggs"])
    week = 7 * 86_400_000
    weeks = [NOW_MS - NOW_MS % week - week, NOW_MS - NOW_MS % week]

    def reason(key: str, seconds: list[float]) -> dict[str, Any]:
        return {"key": key, "doc_count": 2, hist_id: {"buckets": [
            {"key": t, "doc_count": 1, "1": {"value": s}} for t, s in zip(weeks, seconds,
                                                                         strict=True)]}}

    answer = _answer(p, {"A": {"aggregations": {terms_id: {"buckets": [
        reason("bad DIMM", [7200.0, 1800.0]), reason("-", [0.0, 3600.0])]}},
        "hits": {"total": {"value": 4}, "hits": []}}})
    checker = Checker(_FakeElasticsearch([]), now_ms=NOW_MS)  # type: ignore[arg-type]
    drawing = Previewer(checker, tmp_path).draw_panel(p, answer)
    assert {name: [v for _, v in values] for name, values in drawing.data.items()} == {
        "bad DIMM": [2.0, 0.5], "-": [0.0, 1.0]}
