"""The per-node drill-down: one node's state now, its time in each state, its state
timeline, the jobs it ran and those of them that failed.

Opened from the tables of drained and down nodes (the overview's, the job page's "Its
nodes now") with ``var-cluster`` and ``var-node`` and their time range. The node is named
as its documents and the jobs' node lists name it (the host name: Flux's broker host,
Slurm's NodeName), matched as a phrase, so an empty box (the default) or ``*`` names no
node, as the job page's id names no job.

* State now and time in each state: the node's document (its state now; ``state_s`` up
  to its newest event), looked for over :data:`~pipeline.dashboards.overview_nodes.NODES_NOW`
  whatever the range, as the overview's node panels do.
* Its jobs: the job documents whose ``nodelist`` holds the node. A job document lists its
  hosts expanded, one keyword each (JobState ``nodelist``: no hostlist ranges; the fold
  keeps runs only inside its own state), so the phrase matches the host exactly. Jobs
  submitted in the range; failed jobs ended in it.

* State timeline: the node's events in the range (``hpc-node-events``), oldest first,
  each with the state it left the node in where the event says (Slurm's polls; a Flux
  event's depends on the node's other events: schemas/README.md, "Node events"), its
  reason and who set it.
"""

from __future__ import annotations

from typing import Any

from pipeline.dashboards.builder import (
    Grid,
    dashboard,
    dashboard_link,
    dates,
    es_target,
    metric,
    organize_columns,
    organize_fields,
    panel,
    query_var,
    terms,
    textbox_var,
    units,
)
from pipeline.dashboards.datasources import JOBS_BY_END, JOBS_BY_SUBMIT, NODE_EVENTS, NODES
from pipeline.dashboards.job_filters import ALL, FAILED, job_link
from pipeline.dashboards.overview import UID as OVERVIEW_UID
from pipeline.dashboards.overview_nodes import NODE_UID, NODES_NOW
from pipeline.fold.nodes import STATES

__all__ = ["JOBS_OF_NODE", "NODE", "UID", "build"]

UID = NODE_UID

#: The node's document: its name as a phrase (never a wildcard: module docstring)
NODE = 'node:"$node" AND (cluster:$cluster)'
#: The jobs that ran on it: their node lists hold its name
JOBS_OF_NODE = 'nodelist:"$node" AND (cluster:$cluster)'

#: What the panels show with no node selected (Grafana's "No data" otherwise)
_NO_NODE = "No node: pick one in a table of nodes or type its name"
#: Documents the "State now" panel asks for: one per cluster the cluster variable can
#: list (as the job page's document panel; Grafana sorts documents on _doc first)
_DOCUMENTS = 1000
#: Rows of the job tables: the latest submitted (or ended) first
_JOB_ROWS = 100
#: (column as Grafana names it, as shown), in the order shown
_JOB_COLUMNS = (("cluster", "cluster"), ("job_id", "job_id"), ("user", "user"),
                ("state", "state"), ("result", "result"), ("Max t_submit", "t_submit"),
                ("Max t_start", "t_start"), ("Max t_end", "t_end"))
#: Rows of the state timeline (the node's events in the range, oldest first)
_EVENT_ROWS = 500
_EVENT_COLUMNS = ("timestamp", "event", "state", "reason", "reason_by", "scheduler",
                  "source", "context", "event_id")
_FAILED_COLUMNS = (("cluster", "cluster"), ("job_id", "job_id"), ("user", "user"),
                   ("result", "result"), ("failed_node", "failed_node"),
                   ("Max t_end", "t_end"), ("Max run_s", "run_s"))


def build() -> dict[str, Any]:
    grid = Grid()
    grid.add(
        panel("table", "State now", [
            es_target(NODES, "A", query=NODE, metrics=[metric("raw_data", size=str(_DOCUMENTS))]),
        ], w=12, h=12, time_from=NODES_NOW, field_config={"noValue": _NO_NODE},
            overrides=dates("since", "reason_at", "updated_at"),
            transformations=[{"id": "transpose", "options": {}}],
            description="The node's document in hpc-nodes, one row per field: its state "
                        "(and the scheduler's own words), the reason, who set it and when, "
                        "since when it is in its state, its partitions (a node name on "
                        "several clusters, with Cluster All: one column per cluster)."),
        panel("bargauge", "Time in each state", [
            es_target(NODES, "A", query=NODE,
                      metrics=[metric("sum", f"state_s.{state}") for state in STATES],
                      buckets=[terms("node", size=1)]),
        ], w=12, h=12, time_from=NODES_NOW, unit="s",
            field_config={"noValue": _NO_NODE, "min": 0},
            transformations=[{"id": "organize", "options": {"renameByName": {
                f"Sum state_s.{state}": state for state in STATES}}}],
            options={"reduceOptions": {"calcs": ["lastNotNull"], "fields": "",
                                       "values": False},
                     "orientation": "horizontal", "displayMode": "gradient"},
            description="Seconds the node spent in each state since the pipeline first "
                        "saw it (state_s), the current state up to the node's newest event "
                        "(updated_at), not to now; its timeline is the panel below."),
    )
    grid.add(
        panel("table", "State timeline", [
            es_target(NODE_EVENTS, "A", query=NODE,
                      metrics=[metric("raw_data", size=str(_EVENT_ROWS))]),
        ], w=24, h=10, field_config={"noValue": _NO_NODE},
            overrides=dates("timestamp"),
            transformations=organize_fields(_EVENT_COLUMNS, sort="timestamp",
                                            rename={"reason_by": "by"}),
            description=f"The node's events in the time range (hpc-node-events), oldest "
                        f"first ({_EVENT_ROWS} at most): Flux's resource events (drain, "
                        "undrain, offline, online, torpid, ...) and the jobs' alloc and "
                        "free of it; Slurm's polls that saw it, each with the state it "
                        "left the node in (state: Slurm only, as a Flux event's depends "
                        "on the node's other events), the reason and who set it (by)."),
    )
    grid.add(
        panel("table", "Its jobs", [
            es_target(JOBS_BY_SUBMIT, "A", query=JOBS_OF_NODE,
                      metrics=[metric("max", "t_submit"), metric("max", "t_start"),
                               metric("max", "t_end")],
                      buckets=[terms("cluster", size=20, order="asc", order_by="_key"),
                               terms("job_id", size=_JOB_ROWS, order_by=0),
                               *(terms(name, size=1, missing="-")
                                 for name in ("user", "state", "result"))]),
        ], w=12, h=10, field_config={"noValue": _NO_NODE},
            overrides=[job_link(), *dates("t_submit", "t_start", "t_end")],
            transformations=organize_columns(_JOB_COLUMNS, sort="t_submit", desc=True),
            description=f"Jobs submitted in the time range that ran on the node (their "
                        f"nodelist names it), the latest submitted first ({_JOB_ROWS} per "
                        "cluster at most); a job id opens the job's own dashboard."),
        panel("table", "Its failed jobs", [
            es_target(JOBS_BY_END, "A", query=f"{FAILED} AND {JOBS_OF_NODE}",
                      metrics=[metric("max", "t_end"), metric("max", "run_s")],
                      buckets=[terms("cluster", size=20, order="asc", order_by="_key"),
                               terms("job_id", size=_JOB_ROWS, order_by=0),
                               *(terms(name, size=1, missing="-")
                                 for name in ("user", "result", "failed_node"))]),
        ], w=12, h=10, field_config={"noValue": _NO_NODE},
            overrides=[job_link(), *dates("t_end"), *units("s", "run_s")],
            transformations=organize_columns(_FAILED_COLUMNS, sort="t_end", desc=True),
            description="Jobs on the node that ended in the time range failed, out of "
                        "memory, timed out, by a node failure or an exception, the latest "
                        "first, with the node Slurm blamed (failed_node) where it did: "
                        "beside the node's drain reason and time (State now), whether the "
                        "node took its jobs down or they it."),
    )
    variables = [
        query_var("cluster", "Cluster", JOBS_BY_SUBMIT, "cluster", all_value=ALL),
        textbox_var("node", "Node", "",
                    description="The node's host name as the scheduler names it (Flux's "
                                "broker host, Slurm's NodeName), exactly: no wildcards. "
                                "Empty: no node."),
    ]
    return dashboard(
        UID, "jobstream: node details",
        description="One node: its state now, since when and why, its time in each state, "
                    "its state timeline, and the jobs that ran on it.",
        panels=grid.panels, variables=variables, time_from="now-7d", refresh="",
        links=[dashboard_link("Operations overview", OVERVIEW_UID, icon="dashboard",
                              include_vars=True)],
    )
