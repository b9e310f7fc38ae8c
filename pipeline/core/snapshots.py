"""Queue snapshots: what is pending and running per cluster and queue, at one moment.

Each worker summarises only the jobs of the partitions it owns and stamps its snapshot
with its own name and the interval's aligned timestamp; every count is additive, so the
queue's true figure is the *sum* over the workers' snapshots of the same timestamp
(``oldest_pending_age_s`` is the one exception: take the *max*). A job is in exactly one
partition, so no job is ever counted twice.

Beside each queue's snapshot, one *reason snapshot* per (cluster, queue, pending reason)
this worker has pending jobs of: ``reason``, ``reason_jobs``, ``reason_cores``, every other
count 0. Flat documents, not a list inside the queue's snapshot: Grafana's Elasticsearch
data source aggregates them with a plain ``terms`` on ``reason`` (a list of objects would
need nested aggregations it cannot build), and since their other counts are 0, sums over
all snapshots of an instant stay what they were. Pending jobs without a reason count
under :data:`UNKNOWN_REASON`, so the reasons of a queue add up to its pending jobs.

*Node rows* (:func:`build_node_snapshots`), at the same instants: one per (cluster, node
state, node reason) of the nodes this worker holds (the node table's entries of its
partitions: a node is in exactly one, as a job is), with ``node_count`` nodes and
``node_s`` = ``node_count`` x the interval, the node-seconds that sample stands for; no
queue (``queue`` empty: a Slurm node is in several partitions, a Flux node in none the
events name) and every queue count 0, so they add nothing to the queues' sums. A week's
``sum(node_s)`` of the drained rows is the node-seconds drained that week, as sampled: a
drain shorter than the interval may be missed, an interval a worker missed (down, or its
partitions moving) counts nothing. Cost: the worker keeps one :class:`NodeSummary` per
node it holds (agents.active_nodes), updated as it writes a node's state, so a snapshot
is one pass over them, O(nodes held), and as many rows as distinct (cluster, state,
reason).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

__all__ = ["NODE_QUEUE", "UNKNOWN_REASON", "JobSummary", "NodeSummary", "align",
           "build_node_snapshots", "build_snapshots", "summarize", "summarize_node"]

#: Queue name used when a source gives none.
DEFAULT_QUEUE = "default"
#: Reason snapshots' name for pending jobs whose document has no ``pending_reason``.
UNKNOWN_REASON = "unknown"
#: The ``queue`` of node rows: none (no queue is named so: Slurm partitions and Flux
#: queues have names, and a job without one is in :data:`DEFAULT_QUEUE`)
NODE_QUEUE = ""


class JobSummary(NamedTuple):
    """The few numbers of one job document that snapshots need (kept in memory, packed:
    agents.active_jobs.ActiveJobs; a tuple, cheap to make again from them)."""

    cluster: str
    queue: str
    state: str
    nodes: int
    cores: int
    gpus: int
    t_submit_ms: int | None
    timelimit_s: float | None
    reason: str | None = None


def summarize(doc: Mapping[str, Any]) -> JobSummary:
    """A job document -> its summary; allocated counts once running, requested before."""
    running = doc.get("state") in ("running", "completing")

    def count(given: str, asked: str) -> int:
        value = doc.get(given) if running else None
        if value is None:
            value = doc.get(asked)
        return int(value or 0)

    reason = doc.get("pending_reason")
    return JobSummary(
        cluster=str(doc.get("cluster", "")),
        queue=str(doc.get("queue") or DEFAULT_QUEUE),
        state=str(doc.get("state", "pending")),
        nodes=max(count("nnodes", "nodes_req"), 1) if doc.get("state") != "done" else 0,
        cores=count("ncores", "cores_req"),
        gpus=count("ngpus", "gpus_req"),
        t_submit_ms=doc.get("t_submit"),
        timelimit_s=doc.get("timelimit_s"),
        reason=None if reason is None else str(reason),
    )


class NodeSummary(NamedTuple):
    """What node rows need of one node document (``hpc-nodes``: schemas/README.md, "Node
    state")."""

    cluster: str
    state: str
    #: the node's reason (Flux's drain reason, Slurm's node reason); None: none
    reason: str | None = None


def summarize_node(doc: Mapping[str, Any]) -> NodeSummary:
    """A node document -> its summary (an empty reason is none, as the panels show it)."""
    reason = doc.get("reason")
    return NodeSummary(cluster=str(doc.get("cluster", "")),
                       state=str(doc.get("state") or "unknown"),
                       reason=str(reason) if reason else None)


def align(now: float, interval_s: float) -> float:
    """The start of the interval ``now`` falls in: every worker stamps the same moment."""
    return (now // interval_s) * interval_s


def build_snapshots(jobs: Iterable[JobSummary], now: float, worker: str,
                    partitions: Iterable[int], interval_s: float) -> list[dict[str, Any]]:
    """One snapshot dict (``QueueSnapshot``) per (cluster, queue) this worker tracks jobs of,
    each followed by its reason snapshots (by reason).

    Queues whose jobs are all done still get a snapshot of zeros, so a drained queue reads
    as empty rather than as its last busy value.
    """
    stamp = align(now, interval_s)
    parts = sorted(partitions)
    acc: dict[tuple[str, str], dict[str, Any]] = {}
    reasons: dict[tuple[str, str, str], dict[str, Any]] = {}

    def blank(job: JobSummary, reason: str | None) -> dict[str, Any]:
        return {
            "cluster": job.cluster, "queue": job.queue, "timestamp": int(stamp * 1000),
            "worker": worker, "partitions": parts,
            "pending_jobs": 0, "running_jobs": 0,
            "pending_cores": 0, "running_cores": 0,
            "pending_gpus": 0, "running_gpus": 0,
            "pending_nodes": 0, "running_nodes": 0,
            "pending_node_hours": 0.0,
            # a reason snapshot has no age: null keeps it out of the max
            "oldest_pending_age_s": 0.0 if reason is None else None,
            "reason": reason, "reason_jobs": 0, "reason_cores": 0,
        }

    for job in jobs:
        snap = acc.get((job.cluster, job.queue))
        if snap is None:
            snap = acc[(job.cluster, job.queue)] = blank(job, None)
        if job.state == "pending":
            reason = job.reason or UNKNOWN_REASON
            by_reason = reasons.get((job.cluster, job.queue, reason))
            if by_reason is None:
                by_reason = reasons[(job.cluster, job.queue, reason)] = blank(job, reason)
            by_reason["reason_jobs"] += 1
            by_reason["reason_cores"] += job.cores
            snap["pending_jobs"] += 1
            snap["pending_cores"] += job.cores
            snap["pending_gpus"] += job.gpus
            snap["pending_nodes"] += job.nodes
            snap["pending_node_hours"] += job.nodes * (job.timelimit_s or 0) / 3600.0
            if job.t_submit_ms is not None:
                age = max(stamp - job.t_submit_ms / 1000.0, 0.0)
                snap["oldest_pending_age_s"] = max(snap["oldest_pending_age_s"], age)
        elif job.state in ("running", "completing"):
            snap["running_jobs"] += 1
            snap["running_cores"] += job.cores
            snap["running_gpus"] += job.gpus
            snap["running_nodes"] += job.nodes
    out: list[dict[str, Any]] = []
    for key in sorted(acc):
        out.append(acc[key])
        out += [reasons[r] for r in sorted(reasons) if r[:2] == key]
    return out


def build_node_snapshots(nodes: Iterable[NodeSummary], now: float, worker: str,
                         partitions: Iterable[int], interval_s: float
                         ) -> list[dict[str, Any]]:
    """One node row (``QueueSnapshot`` with ``node_state``) per (cluster, state, reason)
    of ``nodes``, in that order, stamped as :func:`build_snapshots` stamps the same
    instant: ``node_count`` nodes, ``node_s`` their node-seconds over one interval."""
    stamp = align(now, interval_s)
    parts = sorted(partitions)
    counts: dict[tuple[str, str, str | None], int] = {}
    for node in nodes:
        key = (node.cluster, node.state, node.reason)
        counts[key] = counts.get(key, 0) + 1
    return [{
        "cluster": cluster, "queue": NODE_QUEUE, "timestamp": int(stamp * 1000),
        "worker": worker, "partitions": parts,
        "pending_jobs": 0, "running_jobs": 0, "pending_cores": 0, "running_cores": 0,
        "pending_gpus": 0, "running_gpus": 0, "pending_nodes": 0, "running_nodes": 0,
        "pending_node_hours": 0.0, "oldest_pending_age_s": None,
        "reason": None, "reason_jobs": 0, "reason_cores": 0,
        "node_state": state, "node_reason": reason,
        "node_count": n, "node_s": n * float(interval_s),
    } for (cluster, state, reason), n in sorted(counts.items(), key=_node_order)]


def _node_order(item: tuple[tuple[str, str, str | None], int]) -> tuple[str, str, str]:
    cluster, state, reason = item[0]
    return cluster, state, "" if reason is None else f"~{reason}"
