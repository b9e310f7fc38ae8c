"""``jobstream dashboards check`` on the real Elasticsearch, with what the pipeline writes.

The indices are made with the sink's templates and filled with the documents the real
stages produce from a synthetic workload (dashboard_data); the check must then find every
shipped panel ok and non-empty. Bad dashboards must come out broken, for the reason
Elasticsearch itself gives.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from dashboard_data import FAILED_RESULTS, Indexed, index_all, pipeline_output
from elasticsearch import Elasticsearch

from pipeline.cli import main
from pipeline.dashboards import render
from pipeline.dashboards.builder import es_target, metric, panel, terms
from pipeline.dashboards.check import Checker, Status
from pipeline.dashboards.datasources import DATASOURCES, JOBS_BY_END, JOBS_BY_SUBMIT
from pipeline.dashboards.grafana_query import build_search, substitute, variable_values
from pipeline.dashboards.grafana_time import TimeRange
from pipeline.runtime.config import Config
from pipeline.sink.names import Family, alias_name
from pipeline.sink.templates import ensure_indices
from pipeline.tooling.demo import DemoOptions
from pipeline.tooling.workload import WorkloadSpec

#: Targets the workload has no data for: it makes no preemption or requeue, and every
#: prolog and epilog succeeds. (The GPU-idle panel has its long jobs: running since 1-2
#: hours before the workload, two of them with GPUs idle all along.)
NO_DATA_IN_WORKLOAD = {
    ("Exceptions, preemptions and requeues", "C"),
    ("Prolog and epilog duration", "B"),
}
#: The workload's long jobs (WorkloadSpec.long_jobs, the demo's default): running since
#: before it and at "now", idle, near their memory limit, with idle GPUs or busy
LONG_JOBS = DemoOptions().long_jobs
GPU_IDLE = "GPU jobs idle for $gpu_idle_min minutes, by user"

JOB_BOARD = "jobstream: job details"
#: The job dashboard's targets, all empty until a job id is given: the id is matched as a
#: phrase, so the default (no id) names no job (and so no node: $job_nodes is __empty__).
NO_JOB_SELECTED = {(JOB_BOARD, title, "A") for title in (
    "Durations", "Event timeline", "Job document", "Events", "Its nodes now")} | {
    (JOB_BOARD, f"{what} over time", "A") for what in ("CPU", "Memory", "GPU")}
NODE_BOARD = "jobstream: node details"
#: The node dashboard's targets, all empty until a node is given, as the job's
NO_NODE_SELECTED = {(NODE_BOARD, title, "A") for title in (
    "State now", "Time in each state", "State timeline", "Its jobs", "Its failed jobs")}
DOWN_OR_DRAINED = ("drained", "draining", "down")


def run_check(cfg: Config, *args: str) -> Result:
    env = {"JOBSTREAM_ELASTICSEARCH__URL": cfg.elasticsearch.url,
           "JOBSTREAM_ELASTICSEARCH__INDEX_PREFIX": cfg.elasticsearch.index_prefix}
    return CliRunner().invoke(main, ["dashboards", "check", *args], env=env)


@pytest.fixture
def indexed(stack_cfg: Config, es: Elasticsearch) -> Indexed:
    # 540 jobs over the last 30 minutes: at "now" some wait, some run, most are done; and
    # the long jobs, running since 1-2 hours before
    now = time.time()
    data = pipeline_output(WorkloadSpec(seed=11, jobs=540, rate=0.3, start=now - 1800,
                                        long_jobs=LONG_JOBS), now)
    states = data.states()
    assert states["pending"] and states["running"] and states["done"]
    index_all(es, stack_cfg.elasticsearch.index_prefix, data)
    return data


def _a_done_flux_job(indexed: Indexed) -> dict[str, Any]:
    """One with GPUs and node samples: the job page's usage panels all have data."""
    return next(d for d in indexed.jobs if d["scheduler"] == "flux" and d["state"] == "done"
                and d["ngpus"] and d["usage_gpu_util_pct"] is not None)


def test_every_shipped_panel_is_ok_and_shows_data(stack_cfg: Config, indexed: Indexed) -> None:
    # a job whose nodes have node documents (Slurm's: the data has no Flux node stream)
    job = indexed.a_job_on_documented_nodes()
    node = indexed.a_drained_node_with_failed_jobs()
    result = run_check(stack_cfg, "--json", "--strict", "--var", f"job_id={job['job_id']}",
                       "--var", f"node={node['node']}")
    report = json.loads(result.output)
    bad = [(p["title"], p["status"], [t for t in p["targets"] if t["status"] != "ok"])
           for p in report["panels"] if p["status"] != "ok"]
    assert bad == []
    assert result.exit_code == 0
    titles = {p["title"] for p in report["panels"]}
    shipped = {p["title"] for b in render.dashboards() for p in b["panels"] if p.get("targets")}
    assert shipped <= titles
    empty_targets = {(p["title"], t["ref_id"]) for p in report["panels"]
                     for t in p["targets"] if t["status"] == "empty"}
    assert empty_targets == NO_DATA_IN_WORKLOAD

    # The queries select what they should: the time filter of each data source, the
    # panel's own query, "All" matching documents without the field (Flux jobs have no
    # user name here).
    by_title = {(p["dashboard"], p["title"]): p for p in report["panels"]}
    overview = "jobstream: HPC operations overview"

    def hits(title: str, ref: str = "A", board: str = overview) -> int:
        target = next(t for t in by_title[(board, title)]["targets"] if t["ref_id"] == ref)
        return int(target["hits"])

    jobs = indexed.jobs
    assert hits("variable $user", "var") == len(jobs)
    assert hits("Longest-waiting pending jobs") == sum(d["state"] == "pending" for d in jobs)
    assert hits("Job ends by result") == sum(d["t_end"] is not None for d in jobs)
    assert hits("Job flow: submits, starts, ends", "B") == sum(
        d["t_start"] is not None for d in jobs)
    # the queues' panels leave the node rows out; the node rows' panels take theirs
    node_rows = [s for s in indexed.snapshots if s.get("node_state") is not None]
    assert hits("Queue depth by queue") == len(indexed.snapshots) - len(node_rows)
    assert hits("Node-hours lost to drains per week, by reason") == sum(
        s["node_state"] in ("drained", "draining") for s in node_rows) > 0
    assert hits("Node-hours down per week, by reason") == sum(
        s["node_state"] == "down" for s in node_rows) > 0
    # event documents are one per event id: a job polled twice states some events twice
    assert hits("Exceptions, preemptions and requeues") == len(
        {e.event_id for e in indexed.events if e.event == "exception"})
    # its lifecycle: the node samples are drawn in the usage panels
    assert hits("Events", board=JOB_BOARD) == len(
        {e.event_id for e in indexed.events if e.job_id == job["job_id"] and e.event != "usage"})
    assert hits("Job document", board=JOB_BOARD) == sum(d["job_id"] == job["job_id"]
                                                        for d in indexed.jobs)
    # Nodes: the "now" panels see every node, whatever the range; the job's nodes through
    # $job_nodes, its node list as Grafana writes it (("a" OR "b"), escaped)
    nodes = indexed.nodes
    down = [n for n in nodes if n["state"] in DOWN_OR_DRAINED]
    assert hits("Drained, draining and down nodes now") == len(down) == 3
    assert hits("Nodes by state") == len(nodes)
    assert hits("Drains and downs begun in the range") == len(down)
    assert hits("Node-hours in drain so far, by reason") == sum(
        n["state_s"]["drained"] + n["state_s"]["draining"] > 0 for n in nodes) > 0
    assert hits("Its nodes now", board=JOB_BOARD) == len(indexed.documented_nodes(job)) > 0
    # the failed jobs on them, through $bad_nodes (their names, as Grafana writes them:
    # with Cluster All a name joins the jobs of any cluster); the data drains the failed
    # Slurm jobs' hosts (dashboard_data.node_output), so some are there
    bad = {n["node"] for n in down}
    assert hits("variable $bad_nodes", "var") == len(down)
    assert hits("Failed jobs on nodes drained or down now") == sum(
        d["t_end"] is not None and d["result"] in FAILED_RESULTS
        and bool(bad & set(d["nodelist"] or ())) for d in jobs) > 0
    assert hits("State now", board=NODE_BOARD) == 1
    # node events: one per id; the drains and downs those of the polls that saw them
    node_events = indexed.node_events
    assert hits("Drains and downs per week, by reason") == sum(
        e["episode"] is not None for e in node_events) > 0
    assert hits("Node states over time") == sum(
        e["state"] is not None for e in node_events) > 0
    assert hits("State timeline", board=NODE_BOARD) == sum(
        e["node"] == node["node"] for e in node_events) == 2
    on_node = [d for d in jobs if node["node"] in (d["nodelist"] or ())]
    assert hits("Its jobs", board=NODE_BOARD) == len(on_node) > 0
    assert hits("Its failed jobs", board=NODE_BOARD) == sum(
        d["result"] in ("failed", "node_fail", "oom", "timeout", "exception")
        for d in on_node) > 0
    # Efficiency: the weighted means' denominators sum only jobs with the efficiency;
    # the idle-GPU table keeps GPU jobs without utilisation data ("a OR NOT b" would not)
    ended = [d for d in jobs if d["t_end"] is not None]
    for what, eff in (("CPU", "cpu_eff_pct"), ("Memory", "mem_max_pct")):
        assert hits(f"{what} efficiency by user (node-hour weighted)", "B") == sum(
            d[eff] is not None for d in ended) > 0
    assert hits("Jobs under 10 % of their CPU or memory, by user") == sum(
        (d["cpu_eff_pct"] or 100) < 10 or (d["mem_max_pct"] or 100) < 10 for d in ended) > 0
    idle_gpu = [d for d in ended if d["ngpus"] and (d["gpu_util_pct"] is None
                                                    or d["gpu_util_pct"] < 10)]
    assert hits("GPU jobs with idle GPUs, by user") == len(idle_gpu)
    assert {d["gpu_util_pct"] is None for d in idle_gpu} == {True, False}
    # the long jobs whose GPUs idle since their start, more than 15 minutes ago
    assert hits(GPU_IDLE) >= 2

    # Without a job id the job dashboard shows nothing (not some jobs), the rest the same.
    result = run_check(stack_cfg, "--json", "--strict")
    assert result.exit_code == 1
    report = json.loads(result.output)
    assert report["summary"]["broken"] == 0
    empty = {(p["dashboard"], p["title"], t["ref_id"]) for p in report["panels"]
             for t in p["targets"] if t["status"] == "empty"}
    assert empty == NO_JOB_SELECTED | NO_NODE_SELECTED | {
        (overview, *t) for t in NO_DATA_IN_WORKLOAD} | {(JOB_BOARD, "variable $job_nodes", "var")}
    assert {p["title"]: p["status"] for p in report["panels"]
            if p["dashboard"] == JOB_BOARD} == {
                "variable $cluster": "ok", "variable $job_nodes": "empty", **{
                    t: "empty" for _, t, _ in NO_JOB_SELECTED}}
    assert {p["title"]: p["status"] for p in report["panels"]
            if p["dashboard"] == NODE_BOARD} == {"variable $cluster": "ok", **{
                t: "empty" for _, t, _ in NO_NODE_SELECTED}}
    assert run_check(stack_cfg, "--var", "jobid=1").exit_code == 2


def test_the_range_and_panel_overrides_apply(stack_cfg: Config, indexed: Indexed) -> None:
    # Before the workload began no job ended (the long jobs only started); a panel with
    # its own "last 30 days" still sees the jobs running now.
    now_ms = int(time.time() * 1000)
    result = run_check(stack_cfg, "--json", "--from", str(now_ms - 86_400_000),
                       "--to", str(now_ms - 3_600_000))
    report = json.loads(result.output)
    status = {p["title"]: p["status"] for p in report["panels"]}
    assert status["Job ends by result"] == "empty"
    assert status["Running now by bank"] == "ok"
    assert report["summary"]["broken"] == 0
    assert result.exit_code == 0
    assert run_check(stack_cfg, "--from", str(now_ms - 86_400_000),
                     "--to", str(now_ms - 3_600_000), "--strict").exit_code == 1
    # Long ranges stay under Elasticsearch's bucket limit (search.max_buckets).
    result = run_check(stack_cfg, "--json", "--from", "now-30d")
    assert json.loads(result.output)["summary"]["broken"] == 0
    assert result.exit_code == 0


def _bad_dashboard() -> dict[str, Any]:
    targets = {
        "text terms": es_target(JOBS_BY_END, "A", metrics=[metric("count")],
                                buckets=[terms("job_name.text")]),
        "keyword percentiles": es_target(JOBS_BY_END, "A", buckets=[terms("queue")],
                                         metrics=[metric("percentiles", "state",
                                                         percents=["50"])]),
        "typo in query": es_target(JOBS_BY_END, "A", query="reslt:failed",
                                   metrics=[metric("count")], buckets=[terms("queue")]),
        "derivative": es_target(JOBS_BY_END, "A", buckets=[terms("queue")],
                                metrics=[metric("count"), metric("derivative", "1")]),
        "unknown data source": {**es_target(JOBS_BY_END, "A", metrics=[metric("count")],
                                            buckets=[terms("queue")]),
                                "datasource": {"type": "elasticsearch", "uid": "nope"}},
        "fine": es_target(JOBS_BY_SUBMIT, "A", metrics=[metric("count")],
                          buckets=[terms("queue")]),
    }
    panels = []
    for n, (title, target) in enumerate(targets.items()):
        p = panel("table", title, [target], w=4, h=4)
        p["id"] = n + 1
        panels.append(p)
    return {"uid": "bad", "title": "bad", "panels": panels, "templating": {"list": []}}


def test_broken_panels_are_reported(stack_cfg: Config, indexed: Indexed,
                                    tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(_bad_dashboard()))
    result = run_check(stack_cfg, "--json", "--dashboard", str(path))
    assert result.exit_code == 1
    report = json.loads(result.output)
    reasons = {p["title"]: (p["status"], p["targets"][0]["reason"]) for p in report["panels"]}
    assert reasons == {
        "text terms": ("broken", "type-mismatch"),
        "keyword percentiles": ("broken", "type-mismatch"),
        "typo in query": ("broken", "unknown-field"),
        "derivative": ("broken", "unsupported-aggregation"),
        "unknown data source": ("broken", "bad-target"),
        "fine": ("ok", ""),
    }
    human = run_check(stack_cfg, "--dashboard", str(path))
    assert human.exit_code == 1
    assert "broken" in human.output and "5 broken" in human.output


def test_elasticsearch_itself_refuses_what_the_mapping_check_flags(
        stack_cfg: Config, es: Elasticsearch, indexed: Indexed) -> None:
    # The mapping rules are not stricter than the server: the same requests fail there.
    prefix = stack_cfg.elasticsearch.index_prefix
    now_ms = int(time.time() * 1000)
    window = TimeRange(now_ms - 3_600_000, now_ms)
    for target in (_bad_dashboard()["panels"][0]["targets"][0],
                   _bad_dashboard()["panels"][1]["targets"][0]):
        header, body = build_search(target, index=alias_name(prefix, Family.JOBS),
                                    time_field="t_end", time_range=window, interval_ms=60_000)
        (answer,) = es.msearch(searches=[header, body]).body["responses"]
        assert "error" in answer, target


def test_an_unknown_index_is_broken_and_empty_indices_fail_only_strict(
        stack_cfg: Config, es: Elasticsearch) -> None:
    result = run_check(stack_cfg, "--json")
    assert result.exit_code == 1
    reasons = {t["reason"] for p in json.loads(result.output)["panels"] for t in p["targets"]
               if t["datasource"] != "__expr__"}
    assert reasons == {"missing-index"}

    ensure_indices(es, stack_cfg.elasticsearch.index_prefix, "v1")
    result = run_check(stack_cfg, "--json")
    report = json.loads(result.output)
    assert result.exit_code == 0
    assert {p["status"] for p in report["panels"]} == {"empty"}
    assert run_check(stack_cfg, "--strict").exit_code == 1
    assert len(DATASOURCES) == 7


def _job_documents(es: Elasticsearch, prefix: str, board: dict[str, Any],
                   values: dict[str, str], window: TimeRange) -> list[tuple[str, str]]:
    """(cluster, job_id) of the documents the Job document panel shows, from the request
    Grafana would send."""
    (panel_,) = (p for p in board["panels"] if p["title"] == "Job document")
    target = substitute(panel_["targets"][0], {**variable_values(board), **values})
    ds = next(d for d in DATASOURCES if d.uid == target["datasource"]["uid"])
    header, body = build_search(target, index=ds.index(prefix), time_field=ds.time_field,
                                time_range=window, interval_ms=60_000)
    (answer,) = es.msearch(searches=[header, body]).body["responses"]
    assert "error" not in answer, answer
    return sorted((h["_source"]["cluster"], h["_source"]["job_id"])
                  for h in answer["hits"]["hits"])


def test_the_drill_down_selects_one_job_by_either_id(stack_cfg: Config, es: Elasticsearch,
                                                     indexed: Indexed) -> None:
    flux = _a_done_flux_job(indexed)
    events = len({e.event_id for e in indexed.events if e.job_id == flux["job_id"]
                  and e.cluster == flux["cluster"] and e.event != "usage"})
    board = next(b for b in render.dashboards() if b["uid"] == "jobstream-job")
    prefix = stack_cfg.elasticsearch.index_prefix
    now_ms = int(time.time() * 1000)
    window = TimeRange(now_ms - 86_400_000, now_ms)
    checker = Checker(es, prefix=prefix, now_ms=now_ms)
    for job_id in (flux["job_id"], flux["job_id_f58"]):
        for var in board["templating"]["list"]:
            if var["name"] == "job_id":
                var["current"] = {"text": job_id, "value": job_id}
        reports = {r.title: r for r in checker.check_dashboard(board, window)}
        assert reports["Events"].targets[0].hits == events
        assert reports["Job document"].targets[0].hits == 1
        assert _job_documents(es, prefix, board, {}, window) == [
            (flux["cluster"], flux["job_id"])]

    # No id, or a wildcard typed in: no job at all, not the last-indexed documents.
    for nothing in ("", "*"):
        reports = {r.title: r for r in Checker(es, prefix=prefix, now_ms=now_ms, variables={
            "job_id": nothing}).check_dashboard(board, window)}
        for title in ("Durations", "Event timeline", "Job document", "Events"):
            assert (reports[title].status, reports[title].targets[0].hits) == (
                Status.EMPTY, 0), (nothing, title)
        assert _job_documents(es, prefix, board, {"job_id": nothing}, window) == []

    # The same id on another cluster, indexed last: with Cluster All both documents show
    # (Grafana sorts on _doc first, so a size below the matches would keep the newest
    # indexed); with the cluster chosen, that cluster's only.
    twin = {**flux, "cluster": "zz-other"}
    index_all(es, prefix, Indexed(events=[], jobs=[twin], snapshots=[]))
    both = sorted([(flux["cluster"], flux["job_id"]), ("zz-other", flux["job_id"])])
    assert _job_documents(es, prefix, board, {"job_id": flux["job_id"]}, window) == both
    assert _job_documents(es, prefix, board, {"job_id": flux["job_id"],
                                              "cluster": flux["cluster"]},
                          window) == [(flux["cluster"], flux["job_id"])]
