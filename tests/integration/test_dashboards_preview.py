"""``jobstream dashboards preview`` on the real Elasticsearch, with what the pipeline writes.

The indices hold what the real stages make of the demo's workload generator
(dashboard_data, as for ``dashboards check``). Each supported panel type is drawn, and the
numbers read back from the figure equal the aggregation results Elasticsearch returned for
the panel's queries, walked here from the raw answer (not through the preview's frames);
one is also checked against the indexed documents themselves.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from dashboard_data import Indexed, index_all, pipeline_output
from elasticsearch import Elasticsearch

from pipeline.cli import main
from pipeline.dashboards import health, job, node, overview
from pipeline.dashboards.builder import es_target, metric, panel, terms
from pipeline.dashboards.check import Checker, PanelAnswer, panels_of
from pipeline.dashboards.datasources import JOBS_BY_SUBMIT
from pipeline.dashboards.grafana_time import TimeRange
from pipeline.dashboards.preview.previewer import Previewer
from pipeline.runtime.config import Config
from pipeline.tooling.demo import DemoOptions
from pipeline.tooling.workload import WorkloadSpec

pytestmark = pytest.mark.integration


@pytest.fixture
def indexed(stack_cfg: Config, es: Elasticsearch) -> Indexed:
    # with the demo's long jobs, running since hours before: the overview's "now" panels
    # and its GPUs idle for 15 minutes have data
    now = time.time()
    data = pipeline_output(WorkloadSpec(seed=11, jobs=540, rate=0.3, start=now - 1800,
                                        long_jobs=DemoOptions().long_jobs), now)
    index_all(es, stack_cfg.elasticsearch.index_prefix, data)
    return data


@pytest.fixture
def window() -> TimeRange:
    now = int(time.time() * 1000)
    return TimeRange(now - 2 * 3600 * 1000, now + 60_000)


def _checker(stack_cfg: Config, es: Elasticsearch, indexed: Indexed,
             window: TimeRange) -> Checker:
    # a job and a node whose pages have data in every panel (the job's nodes have node
    # documents: Slurm's, the data has no Flux node stream)
    finished = indexed.a_job_on_documented_nodes()
    drained = indexed.a_drained_node_with_failed_jobs()
    return Checker(es, prefix=stack_cfg.elasticsearch.index_prefix, now_ms=window.to_ms,
                   variables={"job_id": str(finished["job_id"]), "node": drained["node"]})


def _answers(checker: Checker, board: Mapping[str, Any], window: TimeRange
             ) -> dict[str, PanelAnswer]:
    return {str(a.panel["title"]): a for a in checker.answer_dashboard(board, window)}


def _drawn(stack_cfg: Config, es: Elasticsearch, indexed: Indexed, window: TimeRange,
           tmp_path: Path, board: Mapping[str, Any], title: str
           ) -> tuple[Checker, PanelAnswer, Any]:
    """The checker, the answer to the shipped panel ``title`` and its drawing."""
    checker = _checker(stack_cfg, es, indexed, window)
    answer = _answers(checker, board, window)[title]
    return checker, answer, Previewer(checker, tmp_path).draw_panel(answer.panel, answer)


def _one_panel_board(uid: str, type_: str, title: str, field: str) -> dict[str, Any]:
    """A dashboard of one panel counting jobs by ``field``'s terms."""
    one = panel(type_, title, [es_target(JOBS_BY_SUBMIT, "A", metrics=[metric("count")],
                                         buckets=[terms(field)])], w=12, h=8)
    one["id"], one["gridPos"] = 1, {"x": 0, "y": 0, "w": 12, "h": 8}
    return {"uid": uid, "title": uid, "panels": [one]}


def _buckets(node: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The buckets of the one aggregation in ``node`` (terms, histogram, filters)."""
    aggs = [v for k, v in node.items() if isinstance(v, Mapping) and "buckets" in v]
    assert len(aggs) == 1, node.keys()
    buckets = aggs[0]["buckets"]
    if isinstance(buckets, Mapping):  # filters: keyed buckets
        return [dict(b, key=k) for k, b in buckets.items()]
    return list(buckets)


def _metric_value(bucket: Mapping[str, Any], metric_def: Mapping[str, Any]) -> float:
    if metric_def["type"] == "count":
        return float(bucket["doc_count"])
    return float(bucket[str(metric_def["id"])]["value"])


def test_every_panel_is_drawn_and_the_pages_name_them(stack_cfg: Config, es: Elasticsearch,
                                                      indexed: Indexed, window: TimeRange,
                                                      tmp_path: Path) -> None:
    boards = [overview.build(), job.build(), node.build(), health.build()]
    done = Previewer(_checker(stack_cfg, es, indexed, window), tmp_path).preview(boards, window)
    for board, result in zip(boards, done, strict=True):
        shown = [p for p in panels_of(board) if p.get("type") != "row"]
        assert [p.title for p in result.panels] == [str(p["title"]) for p in shown]
        html = result.page.read_text(encoding="utf-8")
        for p in panels_of(board):
            assert _html_text(str(p["title"])) in html, p["title"]
        for p in result.panels:
            assert (result.page.parent / p.image).stat().st_size > 2000, p.title
        assert result.sheet is not None and result.sheet.stat().st_size > 10_000
    by_board = {r.uid: r for r in done}
    # the workload fills every Elasticsearch panel; the pipeline dashboard's are Prometheus
    overview_panels = by_board["jobstream-overview"].panels
    assert [(p.title, p.status, p.reason) for p in overview_panels if p.status != "ok"] == []
    job_panels = by_board["jobstream-job"].panels
    assert [(p.title, p.status, p.reason) for p in job_panels if p.status != "ok"] == []
    node_panels = by_board["jobstream-node"].panels
    assert [(p.title, p.status, p.reason) for p in node_panels if p.status != "ok"] == []
    pipeline_panels = by_board["jobstream-pipeline"].panels
    assert {p.status for p in pipeline_panels} == {"placeholder"}
    assert all("Prometheus data source" in p.reason for p in pipeline_panels)
    index = (tmp_path / "index.html").read_text(encoding="utf-8")
    assert all(f"{r.uid}/index.html" in index for r in done)


def test_a_terms_bar_chart_draws_the_sums_elasticsearch_returned(
        stack_cfg: Config, es: Elasticsearch, indexed: Indexed, window: TimeRange,
        tmp_path: Path) -> None:
    _, answer, drawing = _drawn(stack_cfg, es, indexed, window, tmp_path, overview.build(),
                                "Running now by bank")
    (ref, target), = answer.targets.items()
    want: dict[str, dict[str, float]] = {}
    for bucket in _buckets(answer.responses[ref]["aggregations"]):
        want[str(bucket["key"])] = {}
        for m in target["metrics"]:
            want[str(bucket["key"])][m["type"], m.get("field", "")] = _metric_value(bucket, m)
    got = {bank: sorted(values.values()) for bank, values in drawing.data.items()}
    assert got == {bank: sorted(v.values()) for bank, v in want.items()}
    assert want
    # and the counts are the documents' own: running jobs per bank
    running = Counter(str(d["bank"]) for d in indexed.jobs if d["state"] == "running")
    count = next(k for k in next(iter(want.values())) if k[0] == "count")
    assert {bank: v[count] for bank, v in want.items()} == {
        bank: float(n) for bank, n in running.items() if bank in want}


def test_a_time_series_draws_every_bucket_of_every_series(
        stack_cfg: Config, es: Elasticsearch, indexed: Indexed, window: TimeRange,
        tmp_path: Path) -> None:
    checker, answer, drawing = _drawn(stack_cfg, es, indexed, window, tmp_path,
                                      overview.build(), "Job ends by result")
    (ref, _), = answer.targets.items()
    want: dict[str, list[tuple[float, float]]] = {}
    for term in _buckets(answer.responses[ref]["aggregations"]):
        points = [(float(b["key"]), float(b["doc_count"])) for b in _buckets(term)]
        want[str(term["key"])] = points
    got = {_only_label(name): [(float(t), float(v)) for t, v in points]
           for name, points in drawing.data.items()}
    assert got == want
    assert sum(v for points in want.values() for _, v in points) == sum(
        1 for d in indexed.jobs if d["state"] == "done" and d.get("t_end"))


def test_a_stat_shows_the_last_value_of_its_expression(
        stack_cfg: Config, es: Elasticsearch, indexed: Indexed, window: TimeRange,
        tmp_path: Path) -> None:
    checker, answer, drawing = _drawn(stack_cfg, es, indexed, window, tmp_path,
                                      overview.build(), "Running jobs now")
    sums = _last_values(answer.responses["A"]["aggregations"], answer.targets["A"])
    workers = _last_values(answer.responses["N"]["aggregations"], answer.targets["N"])
    # $A / $N at the last bucket both have a value: the snapshots' sum over workers
    last = max(t for t in sums if sums[t] is not None and workers.get(t))
    assert list(drawing.data.values()) == [pytest.approx(sums[last] / workers[last])]


def test_a_table_draws_the_documents_rows(stack_cfg: Config, es: Elasticsearch,
                                          indexed: Indexed, window: TimeRange,
                                          tmp_path: Path) -> None:
    checker, answer, drawing = _drawn(stack_cfg, es, indexed, window, tmp_path,
                                      overview.build(), "Pending cores by user and bank")
    (ref, _), = answer.targets.items()
    pairs = {(str(u["key"]), str(b["key"]))
             for u in _buckets(answer.responses[ref]["aggregations"]) for b in _buckets(u)}
    header, rows = drawing.data["header"], drawing.data["rows"]
    assert len(rows) == len(pairs) or drawing.data.get("more_rows")
    assert {(str(r[0]), str(r[1])) for r in rows} <= pairs
    assert len(header) >= 3


def test_a_bar_gauge_ends_each_bar_at_its_series_last_value(
        stack_cfg: Config, es: Elasticsearch, indexed: Indexed, window: TimeRange,
        tmp_path: Path) -> None:
    checker, answer, drawing = _drawn(stack_cfg, es, indexed, window, tmp_path,
                                      overview.build(), "Oldest pending job by queue")
    (ref, target), = answer.targets.items()
    want = {}
    for queue in _buckets(answer.responses[ref]["aggregations"]):
        values = [v for v in _last_values(queue, target).items() if v[1] is not None]
        if values:
            want[str(queue["key"])] = max(values)[1]  # lastNotNull: the latest bucket's
    assert want
    assert {_only_label(k): v for k, v in drawing.data.items()} == pytest.approx(want)


def test_logs_show_the_jobs_events_in_the_panels_order(stack_cfg: Config, es: Elasticsearch,
                                                        indexed: Indexed, window: TimeRange,
                                                        tmp_path: Path) -> None:
    checker, answer, drawing = _drawn(stack_cfg, es, indexed, window, tmp_path,
                                      job.build(), "Event timeline")
    assert answer.panel["options"]["sortOrder"] == "Ascending"
    (ref, _), = answer.targets.items()
    # lines of one instant (Slurm's whole seconds) are drawn by their text
    hits = sorted(answer.responses[ref]["hits"]["hits"],
                  key=lambda h: (h["sort"][0], h["_source"]["event"]))
    shown = [line.split()[-1] for line in drawing.data["lines"]]
    # the newest lines that fit, oldest first
    assert shown and shown == [h["_source"]["event"] for h in hits][-len(shown):]
    job_id = checker.variables["job_id"]
    mine = sorted(indexed.events, key=lambda e: e.timestamp)
    # one document per event id: a Slurm job polled twice states some events twice
    assert len(hits) == len({e.event_id for e in mine if e.job_id == job_id
                             and e.event != "usage"})


def test_an_unsupported_panel_is_a_labelled_placeholder_and_counted(
        stack_cfg: Config, es: Elasticsearch, indexed: Indexed, window: TimeRange,
        tmp_path: Path) -> None:
    board = _one_panel_board("odd", "heatmap", "Wait heatmap", "queue")
    done = Previewer(_checker(stack_cfg, es, indexed, window), tmp_path).preview([board],
                                                                                 window)
    (only,) = done[0].panels
    assert only.status == "placeholder" and "heatmap" in only.reason
    assert done[0].count("placeholder") == 1


def test_a_refused_query_is_a_placeholder_saying_why(
        stack_cfg: Config, es: Elasticsearch, indexed: Indexed, window: TimeRange,
        tmp_path: Path) -> None:
    board = _one_panel_board("bad", "barchart", "By a field that is not there",
                             "no_such_field")
    done = Previewer(_checker(stack_cfg, es, indexed, window), tmp_path).preview([board],
                                                                                 window)
    (only,) = done[0].panels
    assert only.status == "placeholder" and only.refused
    assert only.reason.startswith("query A failed: unknown-field")


def test_the_command_writes_the_preview_and_counts_placeholders(
        stack_cfg: Config, indexed: Indexed, tmp_path: Path) -> None:
    env = {"JOBSTREAM_ELASTICSEARCH__URL": stack_cfg.elasticsearch.url,
           "JOBSTREAM_ELASTICSEARCH__INDEX_PREFIX": stack_cfg.elasticsearch.index_prefix}
    result = CliRunner().invoke(main, ["dashboards", "preview", "--out", str(tmp_path),
                                       "--from", "now-2h", "--dashboard", "overview",
                                       "--dashboard", "pipeline"], env=env)
    assert result.exit_code == 0, result.output
    placeholders = len(health.build()["panels"]) - sum(
        1 for p in health.build()["panels"] if p.get("type") == "row")
    assert f"{placeholders} placeholders in all" in result.output
    assert (tmp_path / "jobstream-overview" / "index.html").exists()
    assert not (tmp_path / "jobstream-job").exists()


def _last_values(aggs: Mapping[str, Any], target: Mapping[str, Any]) -> dict[float, Any]:
    (m,) = target["metrics"]
    return {float(b["key"]): (None if m["type"] != "count" and b[m["id"]]["value"] is None
                              else _metric_value(b, m)) for b in _buckets(aggs)}


def _only_label(name: str) -> str:
    """The label value of a series named ``Count {result=completed}`` or ``completed``."""
    found = re.findall(r"=\"?([^,}\"]+)\"?", name)
    return found[0] if found else name


def _html_text(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
