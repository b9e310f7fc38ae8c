"""The per-job drill-down: one job's document, its usage over time and the timeline of its
events.

Opened from the overview's tables with ``var-cluster`` and ``var-job_id`` and the time
range of the overview; the document is found by its submit time, the events by theirs, so
the range must cover the job's life (the default is the last 7 days).

The job id names one job: it is matched as a phrase (``job_id:"$job_id"``), so ``*`` or an
empty box matches no job and every panel says so, instead of showing some jobs. (Grafana
Lucene-escapes a textbox value anyway, ``*`` to ``\\*``; unquoted, the check's emulation,
which does not escape, would read it as a wildcard.) With the cluster at All, an id used
on several clusters matches one job on each: the document and event panels show all of
them, Durations the latest submitted.

The usage over time is the job's node samples, one event document each in the events
index with typed ``usage.*`` figures of one node at one moment (schemas/README.md, "The
series"): one line per node (``usage.node``), each time bucket's mean (CPU, GPU) or
largest (memory) of the node's samples in it, so a node's two samples of one bucket never
add up; the busiest nodes when a job has more than a chart can show.

Its nodes now: the node documents of the hosts in the job's ``nodelist`` (the ``job_nodes``
variable: the node list of the job's documents, "All" without a custom value, so that
Grafana writes the hosts themselves, ``("a" OR "b")``, and no job gives ``__empty__``,
no node), so that a failure and a drain of its node soon after show side by side.
"""

from __future__ import annotations

from typing import Any

from pipeline.dashboards.builder import (
    Grid,
    dashboard,
    dashboard_link,
    date_histogram,
    es_target,
    metric,
    organize_fields,
    panel,
    query_var,
    terms,
    textbox_var,
)
from pipeline.dashboards.datasources import EVENTS, JOBS_BY_SUBMIT
from pipeline.dashboards.job_filters import ALL, JOB_UID
from pipeline.dashboards.overview import UID as OVERVIEW_UID
from pipeline.dashboards.overview_nodes import node_table

__all__ = ["UID", "build"]

UID = JOB_UID

#: Flux users know a job by its f58 id (ƒ...) as often as by the decimal one. Quoted: a
#: phrase matches the id as written, never as a wildcard (see the module's docstring).
JOB = '(job_id:"$job_id" OR job_id_f58:"$job_id") AND (cluster:$cluster)'

#: Documents the "Job document" panel asks for: one per cluster the cluster variable can
#: list (its terms size, builder.query_var). Only the selected id's documents match, so
#: this bounds nothing in practice; it must not be smaller than the matches, as Grafana
#: sorts documents on _doc before t_submit (grafana_query._sort) and would keep the
#: last-indexed ones, not the newest.
_DOCUMENTS = 1000

#: What the panels show with no job selected (Grafana's "No data" otherwise).
_NO_JOB = "No job: pick one in the overview's tables or type its id"

_DURATIONS = ("wait_s", "eligible_wait_s", "run_s", "prolog_s", "epilog_s")

#: The node edge samples every 30 s by default (edge.node.interval_s): no time bucket may
#: be smaller, or some would hold no sample of a node
USAGE_MIN_INTERVAL = "30s"
#: Nodes drawn: the busiest of a job on more (one line each)
USAGE_NODES = 20
#: (title, usage field, per-bucket metric, unit, what the figure is) of the usage panels
_USAGE_SERIES = (
    ("CPU over time", "usage.cpu_now_pct", "avg", "percent",
     "CPU of the job on each node in its sampling intervals as top shows it (100 % = one "
     "busy core: CPU seconds over wall seconds), the mean of a time bucket's samples"),
    ("Memory over time", "usage.mem_mb", "max", "mbytes",
     "memory the job holds on each node (its cgroup's charge, else its processes' resident "
     "sets), the largest of a time bucket's samples"),
    ("GPU over time", "usage.gpu_now_pct", "avg", "percent",
     "mean utilization of the job's GPUs on each node (NVML; none without an NVIDIA "
     "driver), the mean of a time bucket's samples"),
)
_USAGE = f"event:usage AND {JOB}"
#: The lifecycle without the node samples: a long job has hundreds of them per node, which
#: would push its events out of the 500 lines, and the usage panels draw them
_LIFECYCLE = f"{JOB} AND NOT event:usage"
#: The node documents of the job's hosts ($job_nodes: the module's docstring)
_ITS_NODES = "node:$job_nodes AND (cluster:$cluster)"
#: The columns of the events table, in the order shown
_EVENT_COLUMNS = ("@timestamp", "cluster", "event", "source", "seq", "context", "facts",
                  "event_id")


def _usage_panel(title: str, field: str, kind: str, unit: str, what: str) -> dict[str, Any]:
    """One usage figure of the job over time, one line per node."""
    return panel("timeseries", title, [
        es_target(EVENTS, "A", query=_USAGE, alias="{{term usage.node}}",
                  metrics=[metric(kind, field)],
                  buckets=[terms("usage.node", size=USAGE_NODES, order_by=0),
                           date_histogram(EVENTS.time_field)]),
    ], w=8, h=8, interval=USAGE_MIN_INTERVAL, unit=unit,
        field_config={"noValue": _NO_JOB, "min": 0},
        options={"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                 "tooltip": {"mode": "multi", "sort": "desc"}},
        description=f"From the node edge's samples of the job ({field}): the {what}; one "
                    f"line per node (the {USAGE_NODES} highest of a job on more). Empty for "
                    "a job no node edge sampled.")


def build() -> dict[str, Any]:
    grid = Grid()
    grid.add(
        panel("stat", "Durations", [
            # One job, the latest submitted of those matching, chosen by terms ordered on
            # t_submit: raw data would not be (Grafana sorts documents on _doc before
            # t_submit, see grafana_query._sort), so with an id used on several clusters
            # it showed whichever document was indexed last.
            es_target(JOBS_BY_SUBMIT, "A", query=JOB,
                      metrics=[metric("max", "t_submit"),
                               *(metric("max", name) for name in _DURATIONS)],
                      buckets=[terms("cluster", size=1, order_by=0),
                               terms("job_id", size=1, order_by=0)]),
        ], w=24, h=4, unit="s", field_config={"noValue": _NO_JOB},
            transformations=[{"id": "organize", "options": {
                "renameByName": {f"Max {name}": name for name in _DURATIONS}}}],
            options={"reduceOptions": {"calcs": ["lastNotNull"], "values": False,
                                       "fields": "/^(" + "|".join(_DURATIONS) + ")$/"},
                     "colorMode": "none", "graphMode": "none", "textMode": "value_and_name"},
            description="Wait since submit and since eligible, run, prolog and epilog time "
                        "(an id on several clusters, with Cluster All: of the latest "
                        "submitted)."),
    )
    grid.add(*(_usage_panel(*series) for series in _USAGE_SERIES))
    grid.add(
        panel("logs", "Event timeline", [
            es_target(EVENTS, "A", query=_LIFECYCLE, metrics=[metric("logs", limit="500")]),
        ], w=12, h=14, field_config={"noValue": _NO_JOB},
            options={"showTime": True, "sortOrder": "Ascending", "wrapLogMessage": True,
                     "enableLogDetails": True, "dedupStrategy": "none"},
            description="Every canonical event of the job but its node samples (drawn in "
                        "the usage panels), oldest first; open one for its source, context "
                        "and facts."),
        panel("table", "Job document", [
            es_target(JOBS_BY_SUBMIT, "A", query=JOB,
                      metrics=[metric("raw_data", size=str(_DOCUMENTS))]),
        ], w=12, h=14, field_config={"noValue": _NO_JOB},
            transformations=[{"id": "transpose", "options": {}}],
            description="The job's document in hpc-jobs, one row per field (an id on "
                        "several clusters, with Cluster All: one column per cluster)."),
    )
    grid.add(
        panel("table", "Events", [
            es_target(EVENTS, "A", query=_LIFECYCLE,
                      metrics=[metric("raw_data", size="500")]),
        ], w=24, h=10, field_config={"noValue": _NO_JOB},
            transformations=organize_fields(_EVENT_COLUMNS, sort="@timestamp")),
    )
    grid.add(
        node_table("Its nodes now", _ITS_NODES, w=24, h=8, field_config={"noValue": _NO_JOB},
                   description="The job's nodes (its nodelist) as their node documents say "
                               "now: state, reason, who set it, since when. A node drained or "
                               "down since shortly after the job's end (since, reason set) "
                               "beside a failed job is the join of the two; a node opens its "
                               "own dashboard. A node no node document names (no node stream "
                               "from its cluster) is not listed."),
    )
    variables = [
        query_var("cluster", "Cluster", JOBS_BY_SUBMIT, "cluster", all_value=ALL),
        textbox_var("job_id", "Job id", "",
                    description="The job id as the scheduler prints it (Flux: decimal or "
                                "f58), exactly: no wildcards. Empty: no job."),
        query_var("job_nodes", "Its nodes", JOBS_BY_SUBMIT, "nodelist", query=JOB,
                  all_value="",
                  description="The hosts of the job's node list (All: every one)."),
    ]
    return dashboard(
        UID, "jobstream: job details",
        description="One job: its document (state, result, times, sizes), its CPU, memory "
                    "and GPU over time, every event the pipeline recorded for it and its "
                    "nodes' state now.",
        panels=grid.panels, variables=variables, time_from="now-7d", refresh="",
        links=[dashboard_link("Operations overview", OVERVIEW_UID, icon="dashboard",
                              include_vars=True)],
    )
