"""The overview's "Nodes" rows: drained and down nodes now and the failed jobs on them,
nodes by state, node-hours in drain by reason, drains and downs begun in the range (the
node documents); drains and downs per week by reason and the nodes' states over time (the
node events).

The first row reads the node documents (``hpc-nodes``, one per cluster and node, its state
now: schemas/README.md, "Node state") through the data source whose time field is
``since``, when the node's current state began. So:

* the "now" panels look back :data:`NODES_NOW` (a panel time override), far enough to
  see every node whatever its state's age, not only the nodes whose state changed in the
  dashboard's range;
* "begun in the range" is the range on ``since``: the nodes whose *current* drain or
  down began in it (the node events' row counts every drain);
* time in a state is the fold's ``state_s``, up to the document's ``updated_at`` (the
  newest event): the current state's time since then is not in it.

The second row reads the node events (``hpc-node-events``, one per event, at its own
``timestamp``: schemas/README.md, "Node events"):

* a drain or a down is counted once by its ``episode`` (a unique count): a Flux ``drain``
  or ``offline`` is one; a Slurm drain or down is the state events of the polls that saw
  it, which share its ``reason_changed_at``. A week's count is of the drains and downs an
  event stated in it: one polled across two weeks counts in both;
* the states over time are those the events state, Slurm's polls (their ``state``):
  the nodes seen in each state per interval. Flux events have no ``state`` (what one
  leaves depends on the node's other events: schemas/README.md), so Flux nodes are in the
  drains and downs, not there.

The third row reads the node rows of the queue snapshots (``hpc-queue-snapshots``, one
per worker, cluster, node state and reason at each snapshot instant: schemas/README.md,
"Node rows"): the node-hours spent drained (and draining) and down per week, by the
reason the nodes had then, as ``sum(node_s) / 3600``. What the node documents' ``state_s``
cannot say (a node's time is by its reason *now*) and the node events cannot either (an
event is written once, before what ends its drain may arrive). Sampled at the snapshot
instants: a drain shorter than the interval may be missed, an instant no worker
snapshotted counts nothing.

The failed jobs on the drained and down nodes are the job documents that ended in the
range with a failed result and a host of ``$bad_nodes`` in their ``nodelist``
(:func:`bad_nodes_var`): a job failed and its node drained soon after, side by side.

The overview's cluster variable applies; its queue, bank and user variables are the
jobs' and apply to the failed jobs only (a Flux node has no partition).
"""

from __future__ import annotations

from typing import Any

from pipeline.dashboards.builder import (
    BARS,
    LEGEND,
    Grid,
    date_histogram,
    dates,
    drilldown_link,
    es_target,
    math,
    metric,
    organize_columns,
    organize_fields,
    panel,
    query_var,
    row,
    terms,
)
from pipeline.dashboards.datasources import JOBS_BY_END, NODE_EVENTS, NODES, SNAPSHOTS
from pipeline.dashboards.job_filters import FAILED, JOBS, job_link

__all__ = ["BAD_NODES_JOBS", "DOWN_OR_DRAINED", "DRAINS_AND_DOWNS", "NODES_NOW", "NODE_ROWS",
           "NODE_UID", "bad_nodes_var", "node_link", "node_panels", "node_table"]

NODE_UID = "jobstream-node"

#: How far back the "now" panels look on ``since``: a node whose state has not changed
#: for longer than this is missing from them
NODES_NOW = "10y"
#: The states of a node that does not take work: drained (or draining: drained, its jobs
#: still running) and down
DOWN_OR_DRAINED = "state:(drained OR draining OR down)"
_CLUSTER = "(cluster:$cluster)"
#: The snapshots that are node rows (schemas/README.md, "Node rows")
NODE_ROWS = "_exists_:node_state"
#: Node events that state a drain or a down (their ``episode``: module docstring)
DRAINS_AND_DOWNS = "episode:*"
#: The failed jobs on the nodes of ``$bad_nodes`` (:func:`bad_nodes_var`). In
#: parentheses: a value given for the variable (``"n1" OR "n2"``) stays one clause; with
#: no node drained Grafana writes ``__empty__``, which no host is, so no job matches.
BAD_NODES_JOBS = f"nodelist:($bad_nodes) AND {FAILED} AND {JOBS}"
#: Documents of the failed jobs table (Grafana sorts documents on _doc before t_end,
#: grafana_query._sort: beyond this many, the last indexed)
_FAILED_ROWS = 500
_FAILED_COLUMNS = ("t_end", "cluster", "job_id", "user", "result", "failed_node", "nodelist")
#: Rows of the drained and down nodes table (per cluster from Elasticsearch)
_DOWN_ROWS = 200
#: (column as Grafana names it, as shown), in the order shown
_DOWN_COLUMNS = (("cluster", "cluster"), ("node", "node"), ("state", "state"),
                 ("reason", "reason"), ("reason_by", "who"), ("Min since", "since"),
                 ("Max reason_at", "reason set"))


def node_link() -> dict[str, Any]:
    """A data link on a ``node`` column to the node dashboard (the row's cluster)."""
    return drilldown_link("node", "Node details", NODE_UID)


def node_table_target(query: str, ref: str = "A", rows: int = _DOWN_ROWS) -> dict[str, Any]:
    """Nodes matching ``query`` (one row each, the longest in their state first) with
    their state, reason, who set it, since when and when the reason was set."""
    return es_target(NODES, ref, query=query,
                     metrics=[metric("min", "since"), metric("max", "reason_at")],
                     buckets=[terms("cluster", size=20, order="asc", order_by="_key"),
                              terms("node", size=rows, order="asc", order_by=0),
                              *(terms(name, size=1, missing="-")
                                for name in ("state", "reason", "reason_by"))])


def node_table_transformations() -> list[dict[str, Any]]:
    return organize_columns(_DOWN_COLUMNS, sort="since", desc=False)


def node_table(title: str, query: str, *, w: int, h: int, description: str,
               field_config: dict[str, Any] | None = None) -> dict[str, Any]:
    """A table of the nodes matching ``query`` now (:func:`node_table_target`), each
    opening its own dashboard."""
    return panel("table", title, [node_table_target(query)], w=w, h=h,
                 time_from=NODES_NOW, field_config=field_config,
                 overrides=[node_link(), *dates("since", "reason set")],
                 transformations=node_table_transformations(), description=description)


def bad_nodes_var() -> dict[str, Any]:
    """``$bad_nodes``: the nodes drained, draining or down now whose state began in the
    dashboard's range (a variable's query has the range on its data source's time field,
    ``since``). "All" without a custom value, so that Grafana writes the hosts
    themselves, ``("a" OR "b")``, for the failed jobs' ``nodelist``; hidden, as it only
    carries them there."""
    return query_var("bad_nodes", "Drained or down nodes", NODES, "node",
                     query=f"{DOWN_OR_DRAINED} AND {_CLUSTER}", all_value="", hidden=True,
                     description="Nodes drained, draining or down now, since a time in "
                                 "the range (the failed jobs on them: the Nodes row).")


def _failed_on_bad_nodes() -> dict[str, Any]:
    return panel("table", "Failed jobs on nodes drained or down now", [
        es_target(JOBS_BY_END, "A", query=BAD_NODES_JOBS,
                  metrics=[metric("raw_data", size=str(_FAILED_ROWS))]),
    ], w=12, h=9, overrides=[job_link(), *dates("t_end")],
        transformations=organize_fields(_FAILED_COLUMNS, sort="t_end", desc=True),
        description="Jobs that ended in the range failed, out of memory or time, by a "
                    "node failure or an exception, on a node (nodelist) drained, "
                    "draining or down now since a time in the range: a drain soon after "
                    "a failure, the latest ended first, with the node Slurm blamed "
                    "(failed_node) where it did. The drain reason: the node in the table "
                    "beside (reason, who, since when), or the job's own page (a job id "
                    "opens it), whose 'Its nodes now' lists its nodes' states and "
                    "reasons, each opening the node's page. A node drained before the "
                    "range began is not counted; with Cluster All a host name used on "
                    "two clusters joins both. No node drained or down: no job.")


def node_panels(grid: Grid) -> None:
    grid.add(row("Nodes (node documents)"))
    grid.add(
        node_table(
            "Drained, draining and down nodes now", f"{DOWN_OR_DRAINED} AND {_CLUSTER}",
            w=12, h=9,
            description="Nodes that take no work now: drained (no job left), draining "
                        "(drained, its jobs still running) or down, the longest so first, "
                        "with the reason (Slurm's node reason, Flux's drain reason), who "
                        "set it (Slurm's reason_set_by_user, 'slurm' for slurmctld; Flux "
                        "names nobody: '-'), since when the node is in that state and "
                        "when the reason was set. A node opens its own dashboard."),
        _failed_on_bad_nodes(),
    )
    grid.add(
        panel("table", "Nodes by state", [
            es_target(NODES, "A", query=_CLUSTER, metrics=[metric("count")],
                      buckets=[terms("cluster", size=20, order="asc", order_by="_key"),
                               terms("partitions", size=50, order="asc", order_by="_key",
                                     missing="-"),
                               terms("state", size=10, order="asc", order_by="_key")]),
        ], w=8, h=8, time_from=NODES_NOW, unit="short",
            transformations=[{"id": "organize", "options": {"renameByName": {
                "partitions": "partition", "Count": "nodes"}}}],
            description="Nodes per cluster, partition and state now (up, unresponsive, "
                        "draining, drained, down, off, unknown: schemas/README.md, 'Node "
                        "state'). A Slurm node in several partitions counts in each; Flux "
                        "nodes have none ('-'). Over time: 'Node states over time', from "
                        "the node events."),
    )
    in_drain = f"(state_s.drained:>0 OR state_s.draining:>0) AND {_CLUSTER}"
    by_reason = [terms("reason", size=20, order_by=0, missing="-")]
    grid.add(
        panel("bargauge", "Node-hours in drain so far, by reason", [
            es_target(NODES, "A", query=in_drain, metrics=[metric("sum", "state_s.drained")],
                      buckets=by_reason, hide=True),
            es_target(NODES, "B", query=in_drain, metrics=[metric("sum", "state_s.draining")],
                      buckets=by_reason, hide=True),
            math("C", "($A + $B) / 3600"),
        ], w=8, h=8, time_from=NODES_NOW, unit="suffix: node-h",
            field_config={"displayName": "${__field.labels.reason}", "min": 0},
            options={"reduceOptions": {"calcs": ["lastNotNull"], "fields": "",
                                       "values": False},
                     "orientation": "horizontal", "displayMode": "gradient"},
            description="Hours the nodes spent drained or draining (state_s.drained + "
                        "state_s.draining of each node, every drain the pipeline saw), by "
                        "the node's reason now: a node drained once for a reason and "
                        "resumed since counts under '-' (no reason now), and a node "
                        "drained twice under its latest reason. The current drain counts "
                        "up to the node's newest event (updated_at), not to now. Drains "
                        "per week by reason: 'Drains and downs per week, by reason', from "
                        "the node events."),
        panel("timeseries", "Drains and downs begun in the range", [
            es_target(NODES, "A", query=f"{DOWN_OR_DRAINED} AND {_CLUSTER}",
                      alias="{{term state}}", metrics=[metric("count")],
                      buckets=[terms("state", size=5), date_histogram(NODES.time_field)]),
        ], w=8, h=8, interval="5m", unit="short",
            field_config=BARS, options=LEGEND,
            description="Nodes drained, draining or down now whose state began in each "
                        "interval (since). Not a count of drains: a node drained and "
                        "resumed in the range is not here, one drained twice once; every "
                        "drain and down is in 'Drains and downs per week, by reason' (the "
                        "node events)."),
    )
    grid.add(row("Nodes (node events)"))
    grid.add(
        panel("timeseries", "Drains and downs per week, by reason", [
            es_target(NODE_EVENTS, "A", query=f"{DRAINS_AND_DOWNS} AND {_CLUSTER}",
                      alias="{{term reason}}", metrics=[metric("cardinality", "episode")],
                      buckets=[terms("reason", size=10, order_by=0, missing="-"),
                               date_histogram(NODE_EVENTS.time_field, "1w")]),
        ], w=12, h=8, unit="short",
            field_config=BARS, options=LEGEND,
            description="Drains and downs stated in each week, by their reason, each "
                        "counted once (a unique count of the events' episode): Flux drain "
                        "and offline events; Slurm polls that saw a node drained, draining "
                        "or down, one drain (or down) per reason_changed_at slurmctld "
                        "stamped. One polled across two weeks counts in both; a Flux drain "
                        "of a node already drained counts again."),
        panel("timeseries", "Node states over time", [
            es_target(NODE_EVENTS, "A", query=f"state:* AND {_CLUSTER}",
                      alias="{{term state}}", metrics=[metric("cardinality", "node")],
                      buckets=[terms("state", size=10, order="asc", order_by="_key"),
                               date_histogram(NODE_EVENTS.time_field)]),
        ], w=12, h=8, unit="short", options=LEGEND,
            description="Nodes seen in each state (up, unresponsive, draining, drained, "
                        "down, off, unknown) per interval, from the events that state it: "
                        "Slurm's polls (a node seen in two states in one interval counts in "
                        "both; an interval without a change in the cluster has no poll "
                        "event). Flux events carry no state of their own (what one leaves "
                        "depends on the node's other events): their drains and downs are "
                        "in the panel beside."),
    )
    grid.add(row("Nodes (node rows of the snapshots)"))
    grid.add(
        _node_hours_per_week(
            "Node-hours lost to drains per week, by reason", "(drained OR draining)",
            "Node-hours the nodes spent drained or draining (drained, their jobs still "
            "running) in each week, by the reason they had then: sum(node_s) / 3600 of "
            "the snapshots' node rows, each node counted for a snapshot interval at "
            "every snapshot it was drained at (schemas/README.md, 'Node rows'). A node "
            "drained for two reasons in turn counts under each for its time. Sampled: a "
            "drain shorter than the snapshot interval may be missed, and a time no "
            "worker took snapshots (down, rebalancing) counts nothing. The drains "
            "themselves, counted: 'Drains and downs per week, by reason'."),
        _node_hours_per_week(
            "Node-hours down per week, by reason", "down",
            "Node-hours the nodes spent down (Flux offline, Slurm DOWN) in each week, "
            "by the reason they had then ('-': none, as a Flux node offline without a "
            "drain): sum(node_s) / 3600 of the snapshots' node rows, sampled at the "
            "snapshot instants as the drains beside. A node down and drained counts as "
            "drained (a drain outranks the rest), there."),
    )


def _node_hours_per_week(title: str, states: str, description: str) -> dict[str, Any]:
    """Weekly bars of the node-hours in ``states`` (a Lucene value of ``node_state``) by
    node reason, from the snapshots' node rows."""
    return panel("timeseries", title, [
        es_target(SNAPSHOTS, "A", query=f"{NODE_ROWS} AND node_state:{states} AND {_CLUSTER}",
                  metrics=[metric("sum", "node_s")],
                  buckets=[terms("node_reason", size=10, order_by=0, missing="-"),
                           date_histogram(SNAPSHOTS.time_field, "1w")], hide=True),
        math("B", "$A / 3600"),
    ], w=12, h=8, unit="suffix: node-h",
        field_config={**BARS, "displayName": "${__field.labels.node_reason}"},
        options=LEGEND, description=description)
