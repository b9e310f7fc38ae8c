"""The dashboards' usage panels (issue 33 part 3): on the overview, running jobs wasting
their cores, GPU jobs idle for 15 minutes and jobs near their memory limit, from the
running documents' ``usage_*`` figures; the efficiency panels with Flux jobs; on the job
page, CPU, memory and GPU over time from the events index's ``usage.*`` figures."""

from __future__ import annotations

from typing import Any

import pytest
from workload_documents import documents_at

from pipeline.dashboards import job, overview
from pipeline.dashboards.datasources import DATASOURCES
from pipeline.dashboards.fields import check_use, field_uses
from pipeline.dashboards.grafana_query import substitute, variable_values
from pipeline.sink.names import Family
from pipeline.sink.templates import family_body
from pipeline.tooling.workload import WorkloadSpec

OVERVIEW = overview.build()
JOB = job.build()
CPU_NOW = "Running jobs under 10 % of their cores now, by user and bank"
GPU_IDLE = "GPU jobs idle for $gpu_idle_min minutes, by user"
MEMORY = "Jobs within 10 % of their memory limit now"
#: what the panels need of the mappings (the contract's fields), by index
NEEDED = {
    Family.JOBS: {"usage_cpu_now_pct": "double", "usage_gpu_idle_since": "date",
                  "usage_mem_now_pct": "double", "usage_mem_mb": "double"},
    Family.EVENTS: {"usage.cpu_now_pct": "double", "usage.mem_mb": "double",
                    "usage.gpu_now_pct": "double", "usage.node": "keyword"},
}


def _panel(board: dict[str, Any], title: str) -> dict[str, Any]:
    (found,) = [p for p in board["panels"] if p["title"] == title]
    return found


def _buckets(target: dict[str, Any]) -> list[tuple[str, str, str | None]]:
    return [(b["type"], b.get("field", ""), b["settings"].get("missing"))
            for b in target["bucketAggs"]]


def _metrics(target: dict[str, Any]) -> list[tuple[str, str | None]]:
    return [(m["type"], m.get("field")) for m in target["metrics"]]


def _mapping(family: Family) -> dict[str, str]:
    out: dict[str, str] = {}

    def walk(props: dict[str, Any], prefix: str) -> None:
        for name, spec in props.items():
            out[prefix + name] = spec.get("type", "object")
            walk(spec.get("properties", {}), f"{prefix}{name}.")

    walk(dict(family_body(family)["mappings"]["properties"]), "")
    return out


def test_the_running_jobs_panels_end_the_efficiency_row_on_a_line_of_their_own() -> None:
    panels = OVERVIEW["panels"]
    assert [p["title"] for p in panels[-3:]] == [CPU_NOW, GPU_IDLE, MEMORY]
    assert {p["type"] for p in panels[-3:]} == {"table"}
    assert {p["gridPos"]["y"] for p in panels[-3:]} == {panels[-3]["gridPos"]["y"]}
    assert [p["gridPos"]["x"] for p in panels[-3:]] == [0, 8, 16]


def test_the_gpu_idle_span_is_a_variable_of_15_minutes_by_default() -> None:
    (var,) = [v for v in OVERVIEW["templating"]["list"] if v["name"] == "gpu_idle_min"]
    assert var["type"] == "custom" and var["current"]["value"] == "15"
    assert var["label"] == "GPUs idle for (min)"
    # as Grafana shows the title and runs the query with the default
    shown = substitute(_panel(OVERVIEW, GPU_IDLE), variable_values(OVERVIEW))
    assert shown["title"] == "GPU jobs idle for 15 minutes, by user"
    assert shown["targets"][0]["query"].startswith("usage_gpu_idle_since:<now-15m AND ")


def test_running_jobs_under_10_pct_of_their_cores_by_user_and_bank() -> None:
    p = _panel(OVERVIEW, CPU_NOW)
    (t,) = p["targets"]
    assert t["query"].startswith("usage_cpu_now_pct:<10 AND state:running AND (cluster:")
    assert t["datasource"]["uid"] == "jobstream-jobs-submit" and p["timeFrom"] == "30d"
    assert _metrics(t) == [("sum", "ncores"), ("sum", "ngpus"), ("count", None)]
    # most cores first; jobs without a user or bank name (Flux uids) stay, as "-"
    assert _buckets(t) == [("terms", "bank", "-"), ("terms", "user", "-")]
    assert all(b["settings"]["orderBy"] == "1" for b in t["bucketAggs"])
    renamed = p["transformations"][0]["options"]["renameByName"]
    assert renamed["Sum ncores"] == "cores held"
    assert "usage_cpu_now_pct" in p["description"] and "Flux and Slurm" in p["description"]


def test_gpu_jobs_idle_for_15_minutes_by_user() -> None:
    p = _panel(OVERVIEW, GPU_IDLE)
    (t,) = p["targets"]
    assert t["query"].startswith(
        "usage_gpu_idle_since:<now-${gpu_idle_min}m AND state:running AND ")
    assert _metrics(t) == [("count", None), ("sum", "ngpus"),
                           ("min", "usage_gpu_idle_since")]
    assert _buckets(t) == [("terms", "user", "-")]
    # the earliest idle start is a date, under the name the table shows
    assert p["transformations"][0]["options"]["renameByName"][
        "Min usage_gpu_idle_since"] == "idle since"
    assert p["fieldConfig"]["overrides"] == [
        {"matcher": {"id": "byName", "options": "idle since"},
         "properties": [{"id": "unit", "value": "dateTimeAsIso"}]}]
    assert "under 5 %" in p["description"]


def test_jobs_within_10_pct_of_their_memory_limit_now() -> None:
    p = _panel(OVERVIEW, MEMORY)
    (t,) = p["targets"]
    assert t["query"].startswith("usage_mem_now_pct:>=90 AND state:running AND ")
    assert _metrics(t) == [("max", "usage_mem_now_pct"), ("max", "usage_mem_mb"),
                           ("max", "nnodes")]
    assert _buckets(t) == [("terms", "cluster", None), ("terms", "job_id", None),
                           ("terms", "user", "-"), ("terms", "bank", "-")]
    # fullest first, a job id opens the job page, each column in its unit
    assert t["bucketAggs"][1]["settings"]["orderBy"] == "1"
    overrides = {o["matcher"]["options"]: o["properties"] for o in p["fieldConfig"]["overrides"]}
    assert overrides["job_id"][0]["id"] == "links"
    assert overrides["memory now (% of limit)"] == [{"id": "unit", "value": "percent"}]
    assert overrides["memory now (MiB)"] == [{"id": "unit", "value": "mbytes"}]
    organize = p["transformations"][0]["options"]
    assert set(organize["renameByName"].values()) <= set(overrides) | {"nodes"}


def test_the_efficiency_panels_count_flux_jobs_too() -> None:
    # nothing filters on the scheduler; what kept Flux out was the data (now the node
    # samples') and terms on user, which drop jobs without a user name unless "missing"
    start = [p["title"] for p in OVERVIEW["panels"]].index("Efficiency")
    panels = OVERVIEW["panels"][start + 1:-3]  # the ended jobs' (not those running now)
    assert len(panels) == 6
    for p in panels:
        for t in p["targets"]:
            if t["datasource"]["type"] != "elasticsearch":
                continue
            assert "scheduler" not in t["query"], p["title"]
            assert all(b["settings"].get("missing") == "-" for b in t["bucketAggs"]
                       if b.get("field") == "user"), p["title"]
        assert "Slurm only" not in p["description"], p["title"]
        assert "node edge" in p["description"], p["title"]


@pytest.mark.parametrize(("title", "field", "kind", "unit"), [
    ("CPU over time", "usage.cpu_now_pct", "avg", "percent"),
    ("Memory over time", "usage.mem_mb", "max", "mbytes"),
    ("GPU over time", "usage.gpu_now_pct", "avg", "percent")])
def test_the_job_page_draws_its_usage_over_time_one_line_per_node(
        title: str, field: str, kind: str, unit: str) -> None:
    p = _panel(JOB, title)
    assert p["type"] == "timeseries" and p["fieldConfig"]["defaults"]["unit"] == unit
    (t,) = p["targets"]
    assert t["query"] == ('event:usage AND (job_id:"$job_id" OR job_id_f58:"$job_id") '
                          "AND (cluster:$cluster)")
    assert t["datasource"]["uid"] == "jobstream-events"
    assert _metrics(t) == [(kind, field)]
    # per node, the busiest first, then time
    assert [(x["type"], x["field"]) for x in t["bucketAggs"]] == [
        ("terms", "usage.node"), ("date_histogram", "@timestamp")]
    assert t["bucketAggs"][0]["settings"]["orderBy"] == "1"
    assert t["alias"] == "{{term usage.node}}"
    # no bucket narrower than the edge's default interval
    assert p["interval"] == "30s"
    assert field in p["description"] and p["fieldConfig"]["defaults"]["noValue"]


def test_the_usage_panels_fields_are_in_the_mappings_with_their_types() -> None:
    # these are the contract's fields of hpc-jobs and hpc-job-events the panels need
    for family, fields in NEEDED.items():
        mapped = _mapping(family)
        assert {f: mapped.get(f) for f in fields} == fields, family
    by_uid = {d.uid: d for d in DATASOURCES}
    types = {f: {n: frozenset({t}) for n, t in _mapping(f).items()} for f in Family}
    used = set()
    for board, titles in ((OVERVIEW, (CPU_NOW, GPU_IDLE, MEMORY)),
                          (JOB, ("CPU over time", "Memory over time", "GPU over time"))):
        values = variable_values(board)
        for title in titles:
            for raw in _panel(board, title)["targets"]:
                t = substitute(raw, values)
                ds = by_uid[t["datasource"]["uid"]]
                for use in field_uses(t, ds.time_field):
                    assert check_use(use, types[ds.family]) is None, (title, use)
                    used.add(use.field)
    assert {f for fields in NEEDED.values() for f in fields} <= used


def test_the_checked_workload_fills_the_running_usage_panels() -> None:
    # the workload `dashboards check` is tested with (tests/integration/
    # test_dashboards_check.py: 540 jobs over the last 30 minutes, folded up to now): some
    # running jobs match the CPU and the memory panels' queries. (None can match the
    # GPU-idle one: its jobs run at most 15 minutes, the longest time limit, and the edge
    # sees a job's GPUs idle from its first sample on.)
    now = 1_795_000_000.0
    running = [d for d in documents_at(WorkloadSpec(seed=11, jobs=540, rate=0.3,
                                                    start=now - 1800), now)
               if d["state"] == "running"]
    assert sum(d["usage_sampled_at"] is not None for d in running) > 10
    assert any(d["usage_cpu_now_pct"] is not None and d["usage_cpu_now_pct"] < 10
               for d in running)
    assert any(d["usage_mem_now_pct"] is not None and d["usage_mem_now_pct"] >= 90
               for d in running)
