"""Indices full of what the real pipeline makes of a synthetic workload, for dashboard tests.

The workload generator's records due up to "now" go through the real stages: parsed by
``parse_record`` (events), folded by ``fold``/``JobFold`` (job documents), summarised by
``build_snapshots`` every snapshot interval (queue snapshots, as one worker takes them, and
their node rows, ``build_node_snapshots``, of the node documents at each instant),
turned into bulk actions by the sink's ``Converter`` and written by its ``BulkClient``.
Records due later are not delivered, so at "now" some jobs wait and some run. Beside
them, :data:`LONG_PENDING` Slurm jobs polled pending since hours before the workload
(:func:`long_pending`): the alert rule on jobs pending over ``PENDING_LONG_MIN`` minutes
has jobs to select.

The node documents are the node fold's (``fold_nodes``) of Slurm node polls parsed by
``parse_record('slurm-nodes', ...)``: the 24.05 ``scontrol show nodes --json`` fixture
(tests/data/slurm, six nodes: draining, idle, down, drained, powered down, allocated)
made the workload's Slurm cluster's poll (:func:`node_output`), indexed where the sink
keeps them (``<prefix>hpc-nodes-v1-current`` behind the alias ``<prefix>hpc-nodes``,
the sink's contract of issue 36) with their revision as external version. The node
events of those polls are indexed as the sink writes them (its ``Converter``: monthly
``<prefix>hpc-node-events-v1-YYYY.MM`` by their time, id ``event_id``), their documents
the worker's (``event_document``).
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elasticsearch import Elasticsearch

from pipeline.core.model import JobEvent
from pipeline.core.nodes import NodeEvent
from pipeline.core.snapshots import (
    build_node_snapshots,
    build_snapshots,
    summarize,
    summarize_node,
)
from pipeline.dashboards.alerts import PENDING_LONG_MIN
from pipeline.fold import JobFold
from pipeline.fold.nodes import event_document, fold_nodes, node_doc_id
from pipeline.parsers import parse_record
from pipeline.sink.client import BulkClient
from pipeline.sink.converter import Action, Converter, Op
from pipeline.sink.names import Family, alias_name
from pipeline.sink.templates import ensure_indices
from pipeline.tooling.workload import ID_EPOCH, SLURM_IDS_PER_S, Workload, WorkloadSpec
from pipeline.tooling.workload_records import GeneratedRecord, squeue_pending

SNAPSHOT_INTERVAL_S = 30.0
#: Slurm jobs pending since twice the alert rule's threshold before "now", with reasons
LONG_PENDING = (("Priority", 2), ("Resources", 1))
#: Slurm 24.05's ``scontrol show nodes --json`` (tests/data/slurm/README.md)
SLURM_NODES = Path(__file__).resolve().parents[1] / "data" / "slurm" / "nodes_v0.0.41_24.05.json"
#: The node poll is this long before "now", the poll that saw every node idle an hour
#: before it
NODE_POLL_AGO_S = 60.0
IDLE_POLL_BEFORE_S = 3600.0
#: Results of a failed job (the overview's FAILED)
FAILED_RESULTS = frozenset({"failed", "node_fail", "oom", "timeout", "exception"})
#: Where the sink keeps node documents (one index per generation, not monthly)
NODES_INDEX = "hpc-nodes-v1-current"


@dataclass
class Indexed:
    """What was written, for the tests' own expectations."""

    events: list[JobEvent]
    jobs: list[dict[str, Any]]
    snapshots: list[dict[str, Any]]
    nodes: list[dict[str, Any]] = field(default_factory=list)
    node_events: list[dict[str, Any]] = field(default_factory=list)

    def states(self) -> Counter[str]:
        return Counter(str(d["state"]) for d in self.jobs)

    def documented_nodes(self, job: Mapping[str, Any]) -> list[str]:
        """The hosts of ``job`` that have a node document."""
        names = {(d["cluster"], d["node"]) for d in self.nodes}
        return [h for h in job["nodelist"] or () if (job["cluster"], h) in names]

    def a_job_on_documented_nodes(self) -> dict[str, Any]:
        """A job ended well with GPUs and node samples of GPU use on a node that has a
        node document: every panel of the job page has data."""
        return next(d for d in self.jobs if d["state"] == "done" and d["ngpus"]
                    and d["usage_gpu_util_pct"] is not None and self.documented_nodes(d))

    def a_drained_node_with_failed_jobs(self) -> dict[str, Any]:
        """A node drained, draining or down now that ran failed jobs: every panel of
        the node page has data."""
        failed = {(d["cluster"], h) for d in self.jobs if d["result"] in FAILED_RESULTS
                  for h in d["nodelist"] or ()}
        return next(n for n in self.nodes if n["state"] in ("drained", "draining", "down")
                    and (n["cluster"], n["node"]) in failed)


def pipeline_output(spec: WorkloadSpec, now: float) -> Indexed:
    """Events, final job documents and snapshots of ``spec``'s records due by ``now``."""
    folds: dict[str, JobFold] = {}
    summaries: dict[str, Any] = {}
    events: list[JobEvent] = []
    snapshots: list[dict[str, Any]] = []
    stamps: list[float] = []
    next_snapshot: float | None = None

    def take_snapshots(until: float) -> None:
        nonlocal next_snapshot
        while next_snapshot is not None and next_snapshot <= until:
            snapshots.extend(build_snapshots(summaries.values(), next_snapshot, "w1", [0],
                                             SNAPSHOT_INTERVAL_S))
            stamps.append(next_snapshot)
            next_snapshot += SNAPSHOT_INTERVAL_S

    for rec in [*long_pending(spec, now), *Workload(spec).records()]:
        if rec.time > now:
            break
        if next_snapshot is None:
            next_snapshot = (rec.time // SNAPSHOT_INTERVAL_S + 1) * SNAPSHOT_INTERVAL_S
        take_snapshots(rec.time)
        for ev in parse_record(rec.format, rec.payload, cluster=rec.cluster,
                               received_at=rec.time):
            events.append(ev)
            jf = folds.setdefault(ev.key, JobFold())
            jf.add(ev)
            summaries[ev.key] = summarize(jf.documents()[-1])
    take_snapshots(now)
    jobs = [doc for jf in folds.values() for doc in jf.documents()]
    node_events = node_output(jobs, now, spec.slurm_clusters[0])
    snapshots += node_rows(node_events, stamps)
    return Indexed(events, jobs, snapshots, fold_nodes(node_events),
                   [event_document(ev) for ev in node_events])


def node_rows(events: list[NodeEvent], stamps: Iterable[float]) -> list[dict[str, Any]]:
    """The snapshots' node rows at each of ``stamps``, as the worker takes them: of the
    node documents of the events up to then."""
    rows: list[dict[str, Any]] = []
    for stamp in stamps:
        docs = fold_nodes(ev for ev in events if ev.timestamp <= stamp)
        rows += build_node_snapshots(map(summarize_node, docs), stamp, "w1", [0],
                                     SNAPSHOT_INTERVAL_S)
    return rows


def long_pending(spec: WorkloadSpec, now: float) -> list[GeneratedRecord]:
    """Polls of :data:`LONG_PENDING` jobs on the workload's Slurm cluster, submitted
    ``2 x PENDING_LONG_MIN`` before ``now`` (ids below the workload's, which grow with
    submit time), each polled once at the workload's start."""
    cluster = spec.slurm_clusters[0]
    t_submit = int(now - 2 * PENDING_LONG_MIN * 60)
    first = 1000 + int((t_submit - ID_EPOCH) * SLURM_IDS_PER_S)
    reasons = [reason for reason, n in LONG_PENDING for _ in range(n)]
    return [GeneratedRecord(spec.start, cluster, "slurm", "slurm-squeue", f"{cluster}:{jobid}",
                            squeue_pending(cluster, jobid, "sweep", "alice", 1001, "physics",
                                           "long", "normal", t_submit, 1440, 4, 128,
                                           "cpu=128,mem=256000M,node=4,billing=128", reason))
            for jobid, reason in enumerate(reasons, start=first)]


def _slurm_hosts(jobs: Iterable[Mapping[str, Any]], cluster: str) -> list[str]:
    """The cluster's hosts the jobs ran on, those of failed jobs first (by job id)."""
    ran = sorted((d for d in jobs if d["cluster"] == cluster and d["nodelist"]),
                 key=lambda d: (d["result"] not in FAILED_RESULTS, int(d["job_id"])))
    return list(dict.fromkeys(h for d in ran for h in d["nodelist"]))


def node_output(jobs: Iterable[Mapping[str, Any]], now: float, cluster: str
                ) -> list[NodeEvent]:
    """The node events of two polls of ``cluster``: the recorded document, its nodes
    renamed (in its order) to hosts the jobs ran on, failed jobs' hosts first, and its
    times moved so that it was polled :data:`NODE_POLL_AGO_S` ago (the drains and the
    down are minutes older); and one :data:`IDLE_POLL_BEFORE_S` before it that saw the
    same nodes idle, without a reason, so that they spent time up before (the recorded
    one's states and reasons are what the panels show)."""
    recorded = json.loads(SLURM_NODES.read_text())
    hosts = _slurm_hosts(jobs, cluster)
    assert len(hosts) >= len(recorded["nodes"]), "too few hosts in the workload"
    shift = round(now - NODE_POLL_AGO_S) - recorded["last_update"]["number"]
    poll = copy.deepcopy(recorded)
    poll["meta"]["slurm"]["cluster"] = cluster  # the document names its cluster
    poll["last_update"]["number"] += shift
    for node, host in zip(poll["nodes"], hosts, strict=False):
        node["name"] = node["hostname"] = host
        if node["reason_changed_at"]["number"]:
            node["reason_changed_at"]["number"] += shift
    idle = copy.deepcopy(poll)
    idle["last_update"]["number"] -= int(IDLE_POLL_BEFORE_S)
    for node in idle["nodes"]:
        node.update(state=["IDLE"], reason="", reason_set_by_user=None)
        node["reason_changed_at"]["number"] = 0
    events: list[NodeEvent] = []
    for doc in (idle, poll):
        events += parse_record("slurm-nodes", json.dumps(doc).encode(), cluster=cluster,
                               received_at=float(doc["last_update"]["number"]))
    return events


def index_all(es: Elasticsearch, prefix: str, data: Indexed) -> None:
    """Create the indices with the sink's templates and bulk-write ``data`` into them."""
    ensure_indices(es, prefix, "v1")
    conv = Converter(prefix, "v1")
    actions: list[Action] = [conv.job(d) for d in data.jobs]
    actions += [conv.event(e.to_dict()) for e in data.events]
    actions += [conv.snapshot(s) for s in data.snapshots]
    actions += [_node_action(prefix, d) for d in data.nodes]
    actions += [conv.node_event(e) for e in data.node_events]
    _write(BulkClient(es), actions)
    es.indices.refresh(index=",".join(alias_name(prefix, f) for f in Family))


def _node_action(prefix: str, doc: Mapping[str, Any]) -> Action:
    """A node document as the sink writes it (its contract, issue 36): the generation's
    one node index (the template puts it behind the alias), revision as external
    version, nulls left out as in job documents."""
    return Action(family=Family.NODES, op=Op.INDEX, index=f"{prefix}{NODES_INDEX}",
                  doc_id=node_doc_id(doc), version=int(doc["revision"]),
                  source={k: v for k, v in doc.items() if v is not None})


def _write(bulk: BulkClient, actions: Iterable[Action]) -> None:
    results = bulk.write(list(actions))
    refused = [r for r in results if not r.outcome.done]
    assert not refused, f"{len(refused)} documents refused, first: {refused[0]}"
