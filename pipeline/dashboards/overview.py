"""The operations overview dashboard: queues, flow, outcomes, waits, usage, users, efficiency,
nodes.

Panels answer the questions of ``docs/dashboards.md`` ("The overview") where the index
model has the data:

* Queue panels read the queue snapshots. A snapshot is one worker's share of a queue at an
  aligned instant, so a queue's figure at an instant is the *sum* over that instant's
  snapshots; over a time bucket holding several instants the panels show the mean of those
  sums: ``sum(x)`` per bucket divided by the number of distinct snapshot instants in the
  bucket (a Grafana math expression; Elasticsearch here has no scripts). The oldest
  pending age combines with ``max``.
* Job panels read the job documents through the data source whose time field matches the
  question (submits by submit time, waits by start time, outcomes by end time).
* Ratios (failure rate, expansion factor, efficiency) are Grafana math expressions over
  two counts or sums; no panel uses an Elasticsearch script. A node-hour weighted mean
  divides the sum of a product the fold stores (``ef_x_nh``, ``cpu_eff_x_nh``,
  ``mem_eff_x_nh``) by the sum of ``node_hours``.
* Efficiency: of ended jobs, sacct's where Slurm accounts it, else the node edge's
  samples' (``usage_source``); of running jobs now (the row's last line), their figures
  so far, which the fold keeps up to date from the samples (``usage_*``,
  schemas/README.md "Usage while jobs run"), Flux and Slurm alike.

* Node panels read the node documents: :mod:`pipeline.dashboards.overview_nodes`.

Not shown, because the documents do not carry the data: allocation as a share of capacity
(no capacity in snapshots) and running cores by bank over time (snapshots have no bank;
a ``date_histogram`` over ``run_interval`` breaks on the open ranges of running jobs).

The module is long because it is declarative: the panel lists of one dashboard, section by
section, with no logic beyond the few helpers above them.
"""

from __future__ import annotations

from typing import Any

from pipeline.dashboards.builder import (
    BARS,
    LEGEND,
    Grid,
    custom_var,
    dashboard,
    dashboard_link,
    date_histogram,
    dates,
    es_target,
    filters,
    histogram,
    math,
    metric,
    organize_columns,
    panel,
    query_var,
    row,
    terms,
    units,
)
from pipeline.dashboards.datasources import (
    EVENTS,
    JOBS_BY_END,
    JOBS_BY_START,
    JOBS_BY_SUBMIT,
    SNAPSHOTS,
)
from pipeline.dashboards.job_filters import ALL, CLUSTER, FAILED, JOB_UID, JOBS, job_link
from pipeline.dashboards.overview_nodes import NODE_UID, bad_nodes_var, node_panels

__all__ = ["UID", "build"]

UID = "jobstream-overview"
#: Queue and reason snapshots, not node rows (schemas/README.md, "Node rows": their queue
#: is empty, which "All" matches, and their counts are 0: a queue "" of zeros otherwise)
SNAPS = "(cluster:$cluster) AND (queue:$queue) AND NOT _exists_:node_state"
RUNNING = "state:(running OR completing)"

#: Snapshot instants are aligned to the worker's snapshot interval (30 s by default):
#: no time bucket may be smaller, or some would hold no instant.
SNAPSHOT_MIN_INTERVAL = "30s"

_BY_QUEUE = {"displayName": "${__field.labels.queue}"}
_STACKED = {"custom": {"stacking": {"mode": "normal", "group": "A"}, "fillOpacity": 40,
                       "lineWidth": 1}}
_LAST = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
         "colorMode": "value", "graphMode": "area", "textMode": "auto"}


def _snapshot_means(fields: list[tuple[str, str]], *, by_queue: bool,
                    by_reason: bool = False) -> list[dict[str, Any]]:
    """Targets giving the mean over each time bucket of the per-instant sum of each field:
    hidden ``sum`` queries (refs as given), a hidden count of instants ``N``, and one math
    expression per field named ``<ref>m`` (``$A / $N``). ``by_reason``: per pending reason
    too, from the reason snapshots (the only ones with a ``reason``)."""
    buckets = [date_histogram(SNAPSHOTS.time_field)]
    if by_reason:
        buckets = [terms("reason", size=20, order="asc", order_by="_key"), *buckets]
    if by_queue:
        buckets = [terms("queue", size=20, order="asc", order_by="_key"), *buckets]
    targets = [es_target(SNAPSHOTS, ref, query=SNAPS, metrics=[metric("sum", name)],
                         buckets=buckets, hide=True)
               for name, ref in fields]
    # Instants of the cluster, whatever the queue: a queue without a snapshot at an
    # instant had nothing pending or running, which the mean must count as 0.
    targets.append(es_target(SNAPSHOTS, "N", query=CLUSTER,
                             metrics=[metric("cardinality", SNAPSHOTS.time_field)],
                             buckets=[date_histogram(SNAPSHOTS.time_field)], hide=True))
    targets += [math(f"{ref}m", f"${ref} / $N") for _, ref in fields]
    return targets


def _by_ref(ref: str, name: str) -> dict[str, Any]:
    """An override naming the series of one expression ``<name> <queue>``."""
    return {"matcher": {"id": "byFrameRefID", "options": ref},
            "properties": [{"id": "displayName", "value": f"{name} ${{__field.labels.queue}}"}]}


#: Rows of the longest-waiting pending jobs (per cluster from Elasticsearch, then overall).
_PENDING_ROWS = 50
_PENDING_SIZES = ("nodes_req", "cores_req", "gpus_req", "timelimit_s")
#: (column as Grafana names it, as shown), in the order shown
_PENDING_COLUMNS = (("Min t_submit", "t_submit"), ("cluster", "cluster"), ("job_id", "job_id"),
                    ("user", "user"), ("bank", "bank"), ("queue", "queue"),
                    ("pending_reason", "pending_reason"),
                    *((f"Max {name}", name) for name in _PENDING_SIZES),
                    ("Min t_eligible", "t_eligible"))


def _queue_panels(grid: Grid) -> None:
    grid.add(row("Queues (queue snapshots)"))
    grid.add(
        panel("stat", "Pending jobs now", _snapshot_means([("pending_jobs", "A")],
                                                          by_queue=False),
              w=6, h=4, interval=SNAPSHOT_MIN_INTERVAL, unit="short", options=_LAST,
              description="Jobs waiting in the selected queues at the latest snapshot."),
        panel("stat", "Running jobs now", _snapshot_means([("running_jobs", "A")],
                                                          by_queue=False),
              w=6, h=4, interval=SNAPSHOT_MIN_INTERVAL, unit="short", options=_LAST,
              description="Jobs running (or completing) at the latest snapshot."),
        panel("stat", "Pipeline freshness", [
            es_target(JOBS_BY_SUBMIT, "A", query=JOBS, alias="job documents {{term cluster}}",
                      metrics=[metric("max", "updated_at")],
                      buckets=[terms("cluster", size=20, order_by="_key", order="asc")]),
        ], w=12, h=4, unit="dateTimeFromNow",
            options={**_LAST, "reduceOptions": {"calcs": ["lastNotNull"], "fields": "",
                                                "values": True}, "graphMode": "none"},
            field_config={"thresholds": {"mode": "absolute", "steps": [
                {"color": "green", "value": None}]}},
            description="Per cluster, how long ago the newest change of a job document "
                        "happened (now - max(updated_at)). Minutes while the cluster is "
                        "busy mean the flow from the scheduler to Elasticsearch is stuck."),
    )
    grid.add(
        panel("timeseries", "Queue depth by queue",
              _snapshot_means([("pending_jobs", "A")], by_queue=True), w=12, h=8,
              interval=SNAPSHOT_MIN_INTERVAL, unit="short",
              field_config={**_STACKED, **_BY_QUEUE}, options=LEGEND,
              description="Pending jobs per queue (mean over each time bucket of the sum "
                          "over workers' snapshots)."),
        panel("timeseries", "Pending demand by queue (node-hours)",
              _snapshot_means([("pending_node_hours", "A")], by_queue=True), w=12, h=8,
              interval=SNAPSHOT_MIN_INTERVAL, unit="suffix: node-h",
              field_config={**_STACKED, **_BY_QUEUE}, options=LEGEND,
              description="Sum over pending jobs of nodes asked for times time limit."),
    )
    grid.add(
        panel("timeseries", "Pending cores and GPUs by queue",
              _snapshot_means([("pending_cores", "A"), ("pending_gpus", "B")], by_queue=True),
              w=12, h=8, interval=SNAPSHOT_MIN_INTERVAL, unit="short", options=LEGEND,
              overrides=[_by_ref("Am", "cores"), _by_ref("Bm", "GPUs")]),
        panel("timeseries", "Running cores and GPUs by queue",
              _snapshot_means([("running_cores", "A"), ("running_gpus", "B")], by_queue=True),
              w=12, h=8, interval=SNAPSHOT_MIN_INTERVAL, unit="short", options=LEGEND,
              field_config=_STACKED,
              overrides=[_by_ref("Am", "cores"), _by_ref("Bm", "GPUs")]),
    )
    grid.add(
        panel("timeseries", "Pending jobs by reason per queue",
              _snapshot_means([("reason_jobs", "A")], by_queue=True, by_reason=True),
              w=12, h=8, interval=SNAPSHOT_MIN_INTERVAL, unit="short", options=LEGEND,
              field_config={**_STACKED, "displayName":
                            "${__field.labels.queue} ${__field.labels.reason}"},
              description="Why jobs wait: pending jobs per queue and pending_reason (Slurm's "
                          "state_reason; Flux held, dependency, priority, resources; "
                          "unknown: no reason known yet), from the reason snapshots (mean "
                          "over each time bucket of the sum over workers)."),
        panel("table", "Pending cores by user and bank", [
            es_target(JOBS_BY_SUBMIT, "A", query=f"state:pending AND {JOBS}",
                      metrics=[metric("sum", "cores_req"), metric("sum", "gpus_req"),
                               metric("count")],
                      buckets=[terms("bank", size=20, order_by=0, missing="-"),
                               terms("user", size=20, order_by=0, missing="-")]),
        ], w=12, h=8, time_from="30d", unit="short",
            transformations=[{"id": "organize", "options": {"renameByName": {
                "Sum cores_req": "pending cores", "Sum gpus_req": "pending GPUs",
                "Count": "pending jobs"}}}],
            description="Cores (and GPUs) asked for by the jobs pending now, by bank and "
                      "user, most first (jobs submitted in the last 30 days)."),
    )
    grid.add(
        panel("barchart", "Running now by bank", [
            es_target(JOBS_BY_SUBMIT, "A", query=f"{RUNNING} AND {JOBS}",
                      metrics=[metric("sum", "ncores"), metric("sum", "ngpus"),
                               metric("count")],
                      buckets=[terms("bank", size=15, order_by=0)]),
        ], w=8, h=8, time_from="30d", unit="short",
            options={"orientation": "horizontal", "legend": LEGEND["legend"],
                     "xField": "bank", "stacking": "none"},
            description="Cores, GPUs and jobs of the jobs running now, by bank (jobs "
                        "submitted in the last 30 days)."),
        panel("bargauge", "Oldest pending job by queue", [
            es_target(SNAPSHOTS, "A", query=SNAPS, metrics=[metric("max", "oldest_pending_age_s")],
                      buckets=[terms("queue", size=20, order_by=0),
                               date_histogram(SNAPSHOTS.time_field)]),
        ], w=8, h=8, interval=SNAPSHOT_MIN_INTERVAL, unit="s",
            field_config={**_BY_QUEUE, "thresholds": {"mode": "absolute", "steps": [
                {"color": "green", "value": None}, {"color": "orange", "value": 3600},
                {"color": "red", "value": 14400}]}},
            options={"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                     "orientation": "horizontal", "displayMode": "gradient"},
            description="Seconds the oldest pending job of each queue has waited since "
                        "submit, at the latest snapshot."),
        panel("timeseries", "Job flow: submits, starts, ends", [
            es_target(JOBS_BY_SUBMIT, "A", query=JOBS, alias="submits", metrics=[metric("count")],
                      buckets=[date_histogram(JOBS_BY_SUBMIT.time_field)]),
            es_target(JOBS_BY_START, "B", query=JOBS, alias="starts", metrics=[metric("count")],
                      buckets=[date_histogram(JOBS_BY_START.time_field)]),
            es_target(JOBS_BY_END, "C", query=JOBS, alias="ends", metrics=[metric("count")],
                      buckets=[date_histogram(JOBS_BY_END.time_field)]),
        ], w=8, h=8, interval="1m", unit="short", field_config=BARS, options=LEGEND,
            description="Jobs submitted, started and ended per interval: one minute up to "
                        "a day's range, longer beyond (one per job, whatever the number of "
                        "sources that reported it)."),
    )


def _outcome_panels(grid: Grid) -> None:
    grid.add(row("Outcomes"))
    grid.add(
        panel("timeseries", "Job ends by result", [
            es_target(JOBS_BY_END, "A", query=JOBS, alias="{{term result}}",
                      metrics=[metric("count")],
                      buckets=[terms("result", size=12), date_histogram("t_end")]),
        ], w=12, h=8, interval="5m", unit="short", field_config=BARS, options=LEGEND,
            description="Jobs ended per interval (5 minutes or more) by result."),
        panel("timeseries", "Failure rate", [
            es_target(JOBS_BY_END, "A", query=JOBS, metrics=[metric("count")],
                      buckets=[date_histogram("t_end")], hide=True),
            es_target(JOBS_BY_END, "B", query=f"{FAILED} AND {JOBS}", metrics=[metric("count")],
                      buckets=[date_histogram("t_end")], hide=True),
            math("C", "$B / $A * 100"),
        ], w=12, h=8, interval="5m", unit="percent",
            field_config={"displayName": "failed %", "min": 0,
                          "custom": {"thresholdsStyle": {"mode": "line"}},
                          "thresholds": {"mode": "absolute", "steps": [
                              {"color": "green", "value": None},
                              {"color": "red", "value": 20}]}},
            options=LEGEND,
            description="Share of the jobs ended in each interval that failed, ran out of "
                        "memory or time, lost a node or hit a fatal exception."),
    )
    grid.add(
        panel("timeseries", "Exceptions, preemptions and requeues", [
            es_target(EVENTS, "A", query=f"event:exception AND {CLUSTER}",
                      alias="exception {{term context.type}}", metrics=[metric("count")],
                      buckets=[terms("context.type", size=10), date_histogram("@timestamp")]),
            es_target(EVENTS, "B", query=f"event:exception AND context.severity:0 AND {CLUSTER}",
                      alias="fatal exceptions", metrics=[metric("count")],
                      buckets=[date_histogram("@timestamp")]),
            es_target(EVENTS, "C", query=f"event:(preempt OR requeue) AND {CLUSTER}",
                      alias="{{term event}}", metrics=[metric("count")],
                      buckets=[terms("event", size=5), date_histogram("@timestamp")]),
        ], w=12, h=8, interval="1m", unit="short", field_config=BARS, options=LEGEND,
            description="Flux exceptions by type (severity 0 is fatal) and Slurm "
                        "preemptions and requeues, as events."),
        panel("barchart", "Fast failures by first node", [
            es_target(JOBS_BY_END, "A", query=f"{FAILED} AND run_s:<$fast_fail_s AND {JOBS}",
                      metrics=[metric("count")],
                      buckets=[terms("first_node", size=20)]),
        ], w=6, h=8, unit="short",
            options={"orientation": "horizontal", "xField": "first_node",
                     "legend": {"showLegend": False}},
            description="Jobs that failed within $fast_fail_s s of starting, by their first "
                        "node: one node on top is a black hole."),
        panel("barchart", "Fast failures by user", [
            es_target(JOBS_BY_END, "A", query=f"{FAILED} AND run_s:<$fast_fail_s AND {JOBS}",
                      metrics=[metric("count")], buckets=[terms("user", size=20)]),
        ], w=6, h=8, unit="short",
            options={"orientation": "horizontal", "xField": "user",
                     "legend": {"showLegend": False}},
            description="Jobs that failed within $fast_fail_s s of starting, by user."),
    )
    grid.add(
        panel("timeseries", "Prolog and epilog duration", [
            es_target(JOBS_BY_END, "A", query=JOBS,
                      metrics=[metric("percentiles", "prolog_s", percents=["50", "95"]),
                               metric("percentiles", "epilog_s", percents=["50", "95"])],
                      buckets=[date_histogram("t_end")]),
            es_target(EVENTS, "B",
                      query=f"event:(prolog-finish OR epilog-finish) AND NOT context.status:0 "
                            f"AND {CLUSTER}",
                      alias="failed {{term context.description}}", metrics=[metric("count")],
                      buckets=[terms("context.description", size=10),
                               date_histogram("@timestamp")]),
        ], w=12, h=8, interval="5m", unit="s", options=LEGEND,
            description="p50 and p95 of the prolog and epilog time of ended jobs, and "
                        "prologs/epilogs that exited non-zero."),
        panel("barchart", "Run time as a share of the time limit", [
            es_target(JOBS_BY_END, "A", query=JOBS, metrics=[metric("count")],
                      buckets=[histogram("timelimit_used_pct", 10)]),
        ], w=12, h=8, unit="short",
            options={"xField": "timelimit_used_pct", "legend": {"showLegend": False}},
            description="Jobs by percent of their time limit used (10 % bins); a peak at "
                        "100 is jobs killed at their limit."),
    )


def _wait_panels(grid: Grid) -> None:
    grid.add(row("Waits"))
    for title, name, desc in (
            ("Wait since submit by queue (p50/p90/p99)", "wait_s",
             "Start - submit, as XDMoD counts it (holds and dependencies included)."),
            ("Wait since eligible by queue (p50/p90/p99)", "eligible_wait_s",
             "Start - eligible, as Slurm's queue_wait: time a runnable job waited.")):
        grid.add(panel("timeseries", title, [
            es_target(JOBS_BY_START, "A", query=JOBS, alias="{{term queue}} {{metric}}",
                      metrics=[metric("percentiles", name, percents=["50", "90", "99"])],
                      buckets=[terms("queue", size=10), date_histogram("t_start")]),
        ], w=12, h=8, interval="15m", unit="s", options=LEGEND, description=desc))
    grid.add(
        panel("barchart", "Time to start (XDMoD wait buckets)", [
            es_target(JOBS_BY_START, "A", query=JOBS, metrics=[metric("count")],
                      buckets=[terms("wait_bucket", size=10, order="asc", order_by="_key")]),
        ], w=8, h=8, unit="short",
            options={"xField": "wait_bucket", "legend": {"showLegend": False}}),
        panel("table", "Wait by queue and job size (p50/p90)", [
            es_target(JOBS_BY_START, "A", query=JOBS,
                      metrics=[metric("percentiles", "wait_s", percents=["50", "90"]),
                               metric("count")],
                      buckets=[terms("queue", size=10),
                               terms("size_bucket", size=15, order="asc", order_by="_key")]),
        ], w=8, h=8, unit="s", description="Are big jobs starving?"),
        panel("timeseries", "Expansion factor by queue (node-hour weighted)", [
            es_target(JOBS_BY_START, "A", query=JOBS, metrics=[metric("sum", "ef_x_nh")],
                      buckets=[terms("queue", size=10), date_histogram("t_start")],
                      hide=True),
            es_target(JOBS_BY_START, "B", query=JOBS, metrics=[metric("sum", "node_hours")],
                      buckets=[terms("queue", size=10), date_histogram("t_start")],
                      hide=True),
            math("C", "$A / $B"),
        ], w=8, h=8, interval="1h", unit="short", field_config=_BY_QUEUE, options=LEGEND,
            description="(wait + run) / run, weighted by node-hours as XDMoD does; 1 means "
                        "no wait."),
    )


def _usage_panels(grid: Grid) -> None:
    grid.add(row("Usage and users"))
    grid.add(
        panel("timeseries", "Node-hours by bank", [
            es_target(JOBS_BY_END, "A", query=JOBS, alias="{{term bank}}",
                      metrics=[metric("sum", "node_hours")],
                      buckets=[terms("bank", size=15, order_by=0),
                               date_histogram("t_end")]),
        ], w=12, h=8, interval="1h", unit="suffix: node-h", field_config=BARS,
            options=LEGEND,
            description="Node-hours of the jobs that ended in each hour (a long job counts "
                        "at its end)."),
        panel("barchart", "Top banks by consumption", [
            es_target(JOBS_BY_END, "A", query=JOBS,
                      metrics=[metric("sum", "core_hours"), metric("sum", "gpu_hours"),
                               metric("sum", "node_hours")],
                      buckets=[terms("bank", size=20, order_by=0)]),
        ], w=12, h=8, unit="h",
            options={"orientation": "horizontal", "xField": "bank",
                     "legend": LEGEND["legend"]},
            description="Core-, GPU- and node-hours of the jobs ended in the time range."),
    )
    grid.add(
        panel("table", "Top users right now", [
            es_target(JOBS_BY_SUBMIT, "A", query=f"{RUNNING} AND {JOBS}",
                      metrics=[metric("sum", "ncores"), metric("sum", "ngpus"),
                               metric("count")],
                      buckets=[terms("user", size=20, order_by=0)]),
            es_target(JOBS_BY_SUBMIT, "B", query=f"state:pending AND {JOBS}",
                      metrics=[metric("count")], buckets=[terms("user", size=50)]),
        ], w=12, h=8, time_from="30d",
            transformations=[{"id": "joinByField", "options": {"byField": "user",
                                                                "mode": "outer"}}],
            description="Running cores, GPUs and jobs, and pending jobs, per user."),
        panel("barchart", "Job sizes: jobs and node-hours", [
            es_target(JOBS_BY_START, "A", query=JOBS,
                      metrics=[metric("count"), metric("sum", "node_hours")],
                      buckets=[terms("size_bucket", size=15, order="asc", order_by="_key")]),
        ], w=12, h=8, unit="short",
            options={"xField": "size_bucket", "legend": LEGEND["legend"]},
            description="Jobs started per core-count bucket (XDMoD's), and the node-hours "
                        "they used: where the capacity goes."),
    )
    grid.add(
        panel("timeseries", "Active users and banks, cancelled before start", [
            es_target(JOBS_BY_SUBMIT, "A", query=JOBS,
                      metrics=[metric("cardinality", "user"), metric("cardinality", "bank")],
                      buckets=[date_histogram("t_submit")]),
            es_target(JOBS_BY_END, "B", query=f"cancelled_before_start:true AND {JOBS}",
                      alias="cancelled before start", metrics=[metric("count")],
                      buckets=[date_histogram("t_end")]),
        ], w=12, h=8, interval="1h", unit="short", options=LEGEND,
            description="Distinct users and banks submitting per hour (approximate counts), "
                        "and jobs cancelled before they ever ran (XDMoD drops them)."),
        panel("table", "Longest-waiting pending jobs", [
            # Terms ordered by the earliest submit, not raw data: Grafana sorts documents
            # on _doc before t_submit (see grafana_query._sort), so raw data of more
            # pending jobs than its size would show arbitrary ones, not the oldest.
            es_target(JOBS_BY_SUBMIT, "A", query=f"state:pending AND {JOBS}",
                      metrics=[metric("min", "t_submit"), metric("min", "t_eligible"),
                               *(metric("max", name) for name in _PENDING_SIZES)],
                      buckets=[terms("cluster", size=20, order="asc", order_by="_key"),
                               terms("job_id", size=_PENDING_ROWS, order="asc", order_by=0),
                               *(terms(name, size=1, missing="-")
                                 for name in ("user", "bank", "queue", "pending_reason"))]),
        ], w=12, h=8, overrides=[job_link(), *dates("t_submit", "t_eligible")],
            # Grafana names a terms table's metric columns "Min t_submit", "Max nodes_req";
            # organize orders by those names and renames them to the fields'
            transformations=[*organize_columns(_PENDING_COLUMNS, sort="t_submit", desc=False),
                             {"id": "limit", "options": {"limitField": _PENDING_ROWS}}],
            description="The pending jobs submitted longest ago (in the time range), "
                        "oldest first, and why they wait (pending_reason: Slurm's "
                        "state_reason; Flux held, dependency, priority or resources); a job "
                        "id opens the job's own dashboard."),
    )


#: Rows of the jobs near their memory limit (per cluster from Elasticsearch)
_MEMORY_ROWS = 50
#: A job within this percent of its memory limit (on its fullest node) is about to hit it
MEMORY_NEAR_PCT = 90
#: GPUs idle (every GPU of the job under 5 %, the node edge's line) this many minutes
#: are wasted: the choices of the "GPUs idle for" variable, and its default
GPU_IDLE_MINUTES = ("5", "15", "30", "60", "240")
GPU_IDLE_DEFAULT = "15"
#: (column as Grafana names it, as shown), in the order shown
_MEMORY_COLUMNS = (("cluster", "cluster"), ("job_id", "job_id"), ("user", "user"),
                   ("bank", "bank"), ("Max usage_mem_now_pct", "memory now (% of limit)"),
                   ("Max usage_mem_mb", "memory now (MiB)"), ("Max nnodes", "nodes"))


def _usage_now_panels(grid: Grid) -> None:
    """The running jobs wasting what they hold now, from their figures so far."""
    running = f"state:running AND {JOBS}"
    grid.add(
        panel("table", f"Running jobs under {WASTE_PCT} % of their cores now, by user and bank", [
            es_target(JOBS_BY_SUBMIT, "A",
                      query=f"usage_cpu_now_pct:<{WASTE_PCT} AND {running}",
                      metrics=[metric("sum", "ncores"), metric("sum", "ngpus"),
                               metric("count")],
                      buckets=[terms("bank", size=20, order_by=0, missing="-"),
                               terms("user", size=20, order_by=0, missing="-")]),
        ], w=8, h=8, time_from="30d", unit="short",
            transformations=[{"id": "organize", "options": {"renameByName": {
                "Sum ncores": "cores held", "Sum ngpus": "GPUs held",
                "Count": "running jobs"}}}],
            description=f"Running jobs whose cores were under {WASTE_PCT} % busy in their "
                        "newest sampling interval (usage_cpu_now_pct: that interval's CPU "
                        "seconds over its seconds, summed over the job's nodes, as a share "
                        "of the cores held), with the cores and "
                        "GPUs they hold, by bank and user, most cores first ('-': no user "
                        "or bank known). From the node edge's samples, Flux and Slurm; jobs "
                        "submitted in the last 30 days."),
        panel("table", "GPU jobs idle for $gpu_idle_min minutes, by user", [
            es_target(JOBS_BY_SUBMIT, "A",
                      query=f"usage_gpu_idle_since:<now-${{gpu_idle_min}}m AND {running}",
                      metrics=[metric("count"), metric("sum", "ngpus"),
                               metric("min", "usage_gpu_idle_since")],
                      buckets=[terms("user", size=50, order_by=1, missing="-")]),
        ], w=8, h=8, time_from="30d", unit="short", overrides=dates("idle since"),
            transformations=[{"id": "organize", "options": {"renameByName": {
                "Count": "running jobs", "Sum ngpus": "GPUs held",
                "Min usage_gpu_idle_since": "idle since"}}}],
            description="Running jobs every GPU of which has been under 5 % busy for the "
                        "last $gpu_idle_min minutes or more "
                        "(usage_gpu_idle_since, the node edge's: the latest of the nodes'), "
                        "with the GPUs they hold and since when the first of them idles, "
                        "per user ('-': no user name). Jobs without GPU data (no NVIDIA "
                        "driver on the node) never show; jobs submitted in the last 30 days."),
        panel("table", f"Jobs within {100 - MEMORY_NEAR_PCT} % of their memory limit now", [
            es_target(JOBS_BY_SUBMIT, "A",
                      query=f"usage_mem_now_pct:>={MEMORY_NEAR_PCT} AND {running}",
                      metrics=[metric("max", "usage_mem_now_pct"), metric("max", "usage_mem_mb"),
                               metric("max", "nnodes")],
                      buckets=[terms("cluster", size=20, order="asc", order_by="_key"),
                               terms("job_id", size=_MEMORY_ROWS, order_by=0),
                               *(terms(name, size=1, missing="-") for name in ("user", "bank"))]),
        ], w=8, h=8, time_from="30d",
            overrides=[job_link(), *units("percent", "memory now (% of limit)"),
                       *units("mbytes", "memory now (MiB)")],
            transformations=organize_columns(_MEMORY_COLUMNS, sort="memory now (% of limit)",
                                             desc=True),
            description="Running jobs whose memory now is at least "
                        f"{MEMORY_NEAR_PCT} % of their limit on their fullest node "
                        "(usage_mem_now_pct: the node's cgroup limit, else the job's memory "
                        "per node), fullest first, with their memory now summed over nodes "
                        "(usage_mem_mb): the next out-of-memory kills. Jobs whose node "
                        "edge knows no limit (a process reader on Flux) never show; a job "
                        "id opens the job's own dashboard."),
    )


#: (document field, its node-hour product, what it is) of the weighted efficiency panels
_EFFICIENCIES = (("cpu_eff_pct", "cpu_eff_x_nh", "CPU efficiency"),
                 ("mem_max_pct", "mem_eff_x_nh", "Memory efficiency"))
_BY_TERM = {"user": "${__field.labels.user}", "bank": "${__field.labels.bank}"}
#: Jobs without gpu_util_pct. "a OR NOT b" in Lucene is "a, and not b" (NOT is a
#: must-not clause of the whole group), so the negation gets a group of its own.
_NO_GPU_DATA = "(*:* NOT _exists_:gpu_util_pct)"
#: Below this percent of its CPU, memory or GPUs a job counts as wasting them
WASTE_PCT = 10


def _weighted_efficiency(eff: str, product: str, what: str, by: str) -> dict[str, Any]:
    """A node-hour weighted mean efficiency per ``by`` term over time: sum(eff x
    node_hours) / sum(node_hours) of the jobs that have the efficiency (the others would
    weigh in as 0), two hidden sums and a math expression, as the expansion factor."""
    query = f"_exists_:{eff} AND {JOBS}"
    buckets = [terms(by, size=10, order_by=0, missing="-"),
               date_histogram(JOBS_BY_END.time_field)]
    return panel("timeseries", f"{what} by {by} (node-hour weighted)", [
        es_target(JOBS_BY_END, "A", query=query, metrics=[metric("sum", product)],
                  buckets=buckets, hide=True),
        es_target(JOBS_BY_END, "B", query=query, metrics=[metric("sum", "node_hours")],
                  buckets=buckets, hide=True),
        math("C", "$A / $B"),
    ], w=12, h=8, interval="1h", unit="percent",
        field_config={"displayName": _BY_TERM[by], "min": 0}, options=LEGEND,
        description=f"{what} of the jobs ended in each hour, per {by} (top 10 by "
                    f"{product}): each job's {eff} weighted by its node-hours, so a big "
                    "job counts more than a short test. From sacct's steps after the end "
                    "where Slurm accounts them (usage_source sacct), else from the node "
                    "edge's samples of the run (usage_source node: Flux jobs, Slurm "
                    "without accounting); jobs with neither are left out, '-' is jobs "
                    f"without a {by} name.")


def _efficiency_panels(grid: Grid) -> None:
    grid.add(row("Efficiency"))
    for eff, product, what in _EFFICIENCIES:
        grid.add(*(_weighted_efficiency(eff, product, what, by) for by in ("user", "bank")))
    grid.add(
        panel("table", f"Jobs under {WASTE_PCT} % of their CPU or memory, by user", [
            # the query keeps only such jobs, so the users are those with the most of them
            es_target(JOBS_BY_END, "A",
                      query=f"(cpu_eff_pct:<{WASTE_PCT} OR mem_max_pct:<{WASTE_PCT}) "
                            f"AND {JOBS}",
                      metrics=[metric("count"), metric("sum", "node_hours"),
                               metric("sum", "core_hours")],
                      buckets=[terms("user", size=50, missing="-"),
                               filters((f"cpu_eff_pct:<{WASTE_PCT}", "CPU"),
                                       (f"mem_max_pct:<{WASTE_PCT}", "memory"))]),
        ], w=12, h=8,
            description=f"Jobs ended in the time range that used under {WASTE_PCT} % of "
                        "the CPU time they were given (cpu_eff_pct) or of their memory per "
                        "node (mem_max_pct), per user, with their node- and core-hours: at "
                        f"least {100 - WASTE_PCT} % of those CPU hours were idle. A job low on "
                        "both counts in both rows. From sacct, else the node edge's samples "
                        "(Flux and Slurm); '-': jobs without a user name."),
        panel("table", "GPU jobs with idle GPUs, by user", [
            es_target(JOBS_BY_END, "A",
                      query=f"ngpus:>0 AND (gpu_util_pct:<{WASTE_PCT} OR {_NO_GPU_DATA}) "
                            f"AND {JOBS}",
                      metrics=[metric("count"), metric("sum", "gpu_hours")],
                      buckets=[terms("user", size=50, missing="-"),
                               filters((f"gpu_util_pct:<{WASTE_PCT}",
                                        f"GPUs under {WASTE_PCT} %"),
                                       (_NO_GPU_DATA, "no data"))]),
        ], w=12, h=8,
            description=f"GPU jobs ended in the time range whose GPUs were busy under "
                        f"{WASTE_PCT} % of the time on average (gpu_util_pct), with their "
                        "GPU-hours, per user ('-': no user name); from sacct's gres/gpuutil, "
                        "else the node edge's GPU samples (Flux and Slurm). 'no data': GPU "
                        "jobs without gpu_util_pct, where the site does not account "
                        "gres/gpuutil (AccountingStorageTRES with an acct_gather_gpu plugin) "
                        "and no node edge read their GPUs (no NVIDIA driver): their GPUs may "
                        "be idle too, nothing says."),
    )
    _usage_now_panels(grid)


def build() -> dict[str, Any]:
    grid = Grid()
    _queue_panels(grid)
    # the nodes after the queues: "how many nodes are drained or down" is what an
    # operator asks after "why is the queue long"
    node_panels(grid)
    _outcome_panels(grid)
    _wait_panels(grid)
    _usage_panels(grid)
    _efficiency_panels(grid)
    variables = [
        query_var("cluster", "Cluster", JOBS_BY_SUBMIT, "cluster", all_value=ALL),
        query_var("queue", "Queue", JOBS_BY_SUBMIT, "queue", query="(cluster:$cluster)",
                  all_value=ALL),
        query_var("bank", "Bank", JOBS_BY_SUBMIT, "bank", query="(cluster:$cluster)",
                  all_value=ALL),
        query_var("user", "User", JOBS_BY_SUBMIT, "user",
                  query="(cluster:$cluster) AND (bank:$bank)", all_value=ALL),
        custom_var("fast_fail_s", "Fast fail within (s)", ["30", "60", "300", "900"], "60",
                   description="A failed job that ran less than this is a fast failure."),
        custom_var("gpu_idle_min", "GPUs idle for (min)", GPU_IDLE_MINUTES, GPU_IDLE_DEFAULT,
                   description="A running job whose GPUs have all been under 5 % busy this "
                               "long wastes them."),
        bad_nodes_var(),
    ]
    return dashboard(
        UID, "jobstream: HPC operations overview",
        description="Queues, job flow, outcomes, waits, usage, efficiency and nodes of the "
                    "clusters jobstream streams (Flux and Slurm), seconds behind the "
                    "schedulers.",
        panels=grid.panels, variables=variables,
        links=[dashboard_link("Job details", JOB_UID, icon="info", include_vars=False,
                              tooltip="Events and document of one job"),
               dashboard_link("Node details", NODE_UID, icon="info", include_vars=False,
                              tooltip="State and jobs of one node")],
    )
