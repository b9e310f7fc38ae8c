"""The workload's nodes: what the edges say of each cluster's nodes, with its truth (pure).

A centre's monitoring shows its nodes beside its jobs (issue 36), so the workload
(``WorkloadSpec.node_events``) also sends what the edges publish of the nodes of every
cluster, as they publish it:

* **Flux:** the resource journal's responses (``flux-resource-journal``, RFC 44): the
  backlog the edge reads when it connects (the instance's ``restart`` a day before
  ``start``, every rank ``online``), then live ``drain`` and ``undrain`` with their own
  ``nodelist``, and ``offline``, which names ranks only and so carries the rank map as the
  edge adds it (:class:`pipeline.parsers.flux_resource.RankMaps`).
* **Slurm:** ``scontrol show nodes --json`` documents (data_parser v0.0.41) as the node
  poller publishes them: every node idle at the first poll, then one document per change
  holding the node that changed (drained with a reason set by ``root``, resumed, or down,
  ``Not responding`` set by ``slurm``), its ``last_update`` the change's time.

Per cluster, :data:`NODES` nodes named as the jobs name theirs (Flux ``<cluster>-nNNN``,
rank NNN; Slurm ``<cluster>-cNNN``), of which, at random times between ``start`` and the
workload's last job record: :data:`DRAINED` stay drained, :data:`RESUMED` are drained and
resumed, :data:`DOWN` go down. None of them is a node a long job runs on (those run past
the end: a drained node running one would stay ``draining``). Other jobs do run on
drained nodes: a Flux one is ``draining`` until its job's ``free`` (the worker folds the
jobs' allocations), so its truth is ``drained`` since the last ``free`` after the drain
(:func:`drained_after_jobs`); a Slurm poll of the workload states no allocation.

The truth (:func:`node_truth`'s value, document id ``cluster:node`` -> fields) is what each
node's document must say at the end: ``state``, ``drained``, ``reason``, ``reason_by`` and
``since`` (epoch ms, as the fold rounds it). Node records hold no job event: their
``event_ids`` are empty (there is no node events index).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.core.nodes import node_key
from pipeline.tooling.workload_records import GeneratedRecord, hostlist_text

__all__ = ["DOWN", "DRAINED", "NODES", "RESUMED", "drained_after_jobs", "node_records"]

#: nodes per cluster: every host a job of the workload can be given (first 0-63, up to 16)
NODES = 80
#: per cluster: nodes left drained, drained then resumed, gone down
DRAINED, RESUMED, DOWN = 3, 2, 1
DRAIN_REASONS = ("bad DIMM on slot 3", "nhc: ib0 down", "GPU ECC errors",
                 "kernel panic after update", "maintenance window", "fans failing")
#: Slurm partitions by host index (the workload's jobs pick theirs apart from hosts)
_SLURM_PARTITIONS = ((32, ["short", "long"]), (72, ["long"]), (NODES, ["gpu"]))
#: the Flux instance's restart and the first Slurm poll, before ``start``
_RESTART_AGE_S = 86400.0
_FIRST_POLL_AGE_S = 60.0


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _ms(t: float) -> int:
    return round(t * 1000)


def _host(cluster: str, scheduler: str, i: int) -> str:
    return f"{cluster}-{'n' if scheduler == 'flux' else 'c'}{i:03d}"


def _partitions(i: int) -> list[str]:
    return next(parts for below, parts in _SLURM_PARTITIONS if i < below)


@dataclass(frozen=True, slots=True)
class _Change:
    time: float
    index: int
    what: str  # drain, resume, down
    reason: str | None = None


def _plan(rng: random.Random, busy: set[int], start: float, end: float) -> list[_Change]:
    """The changes of one cluster's nodes, in time order."""
    free = [i for i in range(NODES) if i not in busy]
    chosen = rng.sample(free, DRAINED + RESUMED + DOWN)
    span = max(end - start, 1.0)
    out: list[_Change] = []
    for n, i in enumerate(chosen):
        t = start + rng.uniform(0.05, 0.7) * span
        if n < DRAINED + RESUMED:
            out.append(_Change(t, i, "drain", rng.choice(DRAIN_REASONS)))
            if n >= DRAINED:
                out.append(_Change(t + rng.uniform(0.1, 0.25) * span, i, "resume"))
        else:
            out.append(_Change(t, i, "down", "Not responding"))
    return sorted(out, key=lambda c: (c.time, c.index))


def _flux(cluster: str, plan: list[_Change], start: float
          ) -> tuple[list[GeneratedRecord], dict[int, dict[str, Any]]]:
    nodelist = hostlist_text([_host(cluster, "flux", i) for i in range(NODES)])
    ranks = f"0-{NODES - 1}"
    t0 = start - _RESTART_AGE_S
    records = [GeneratedRecord(start, cluster, "flux", "flux-resource-journal",
                          node_key(cluster, _host(cluster, "flux", 0)), _dumps({"events": [
                              {"timestamp": t0, "name": "restart",
                               "context": {"ranks": ranks, "online": "",
                                           "nodelist": nodelist}},
                              {"timestamp": t0 + 1.0, "name": "online",
                               "context": {"idset": ranks}}]}))]
    truth = {i: {"state": "up", "drained": False, "reason": None, "reason_by": None,
                 "since": _ms(t0 + 1.0)} for i in range(NODES)}
    for c in plan:
        host = _host(cluster, "flux", c.index)
        if c.what == "drain":
            entry = {"name": "drain", "context": {"idset": str(c.index), "nodelist": host,
                                                  "reason": c.reason, "overwrite": 0}}
            truth[c.index] = {"state": "drained", "drained": True, "reason": c.reason,
                              "reason_by": None, "since": _ms(c.time)}
            body: dict[str, Any] = {}
        elif c.what == "resume":
            entry = {"name": "undrain", "context": {"idset": str(c.index), "nodelist": host,
                                                    "overwrite": 0}}
            truth[c.index] = {"state": "up", "drained": False, "reason": None,
                              "reason_by": None, "since": _ms(c.time)}
            body = {}
        else:  # Flux's offline names ranks only: the record carries the edge's rank map
            entry = {"name": "offline", "context": {"idset": str(c.index)}}
            truth[c.index] = {"state": "down", "drained": False, "reason": None,
                              "reason_by": None, "since": _ms(c.time)}
            body = {"ranks": ranks, "nodelist": nodelist}
        body["events"] = [{"timestamp": c.time, **entry}]
        records.append(GeneratedRecord(c.time, cluster, "flux", "flux-resource-journal",
                                  node_key(cluster, host), _dumps(body)))
    return records, truth


def _slurm_node(cluster: str, i: int, state: list[str], reason: str | None,
                by: str | None, changed: float | None) -> dict[str, Any]:
    host = _host(cluster, "slurm", i)
    return {"name": host, "hostname": host, "state": state, "reason": reason or "",
            "reason_set_by_user": by or "", "partitions": _partitions(i),
            "reason_changed_at": {"set": changed is not None, "infinite": False,
                                  "number": int(changed or 0)},
            "cpus": 32, "real_memory": 256000}


def _slurm_doc(cluster: str, at: float, nodes: list[dict[str, Any]]) -> bytes:
    return _dumps({
        "meta": {"plugin": {"type": "", "data_parser": "data_parser/v0.0.41"},
                 "command": ["show", "nodes"],
                 "slurm": {"version": {"major": "24", "minor": "05", "micro": "0"},
                           "release": "24.05.0", "cluster": cluster}},
        "last_update": {"set": True, "infinite": False, "number": int(at)},
        "nodes": nodes, "errors": [], "warnings": []})


def _slurm(cluster: str, plan: list[_Change], start: float
           ) -> tuple[list[GeneratedRecord], dict[int, dict[str, Any]]]:
    t0 = int(start - _FIRST_POLL_AGE_S)
    first = [_slurm_node(cluster, i, ["IDLE"], None, None, None) for i in range(NODES)]
    records = [GeneratedRecord(start, cluster, "slurm", "slurm-nodes",
                          node_key(cluster, _host(cluster, "slurm", 0)),
                          _slurm_doc(cluster, t0, first))]
    truth = {i: {"state": "up", "drained": False, "reason": None, "reason_by": None,
                 "since": _ms(t0)} for i in range(NODES)}
    for c in plan:
        t = int(c.time)  # Slurm's times are whole seconds
        if c.what == "drain":
            node = _slurm_node(cluster, c.index, ["IDLE", "DRAIN"], c.reason, "root", t)
            truth[c.index] = {"state": "drained", "drained": True, "reason": c.reason,
                              "reason_by": "root", "since": _ms(t)}
        elif c.what == "resume":
            node = _slurm_node(cluster, c.index, ["IDLE"], None, None, None)
            truth[c.index] = {"state": "up", "drained": False, "reason": None,
                              "reason_by": None, "since": _ms(t)}
        else:
            node = _slurm_node(cluster, c.index, ["DOWN"], c.reason, "slurm", t)
            truth[c.index] = {"state": "down", "drained": False, "reason": c.reason,
                              "reason_by": "slurm", "since": _ms(t)}
        records.append(GeneratedRecord(c.time, cluster, "slurm", "slurm-nodes",
                                  node_key(cluster, node["name"]),
                                  _slurm_doc(cluster, t, [node])))
    return records, truth


def drained_after_jobs(truth: dict[str, dict[str, Any]],
                       frees: Mapping[tuple[str, str], Iterable[float]]) -> None:
    """A drained Flux node is ``draining`` while it runs a job (the worker folds the jobs'
    ``alloc`` and ``free``, agents/jobs.py "Allocations"), so it is ``drained`` since the
    last ``free`` after its drain, if any: ``frees``, (cluster, host) -> the times its
    jobs were freed, moves the truth's ``since`` of those nodes."""
    for want in truth.values():
        if want["scheduler"] != "flux" or want["state"] != "drained":
            continue
        later = [_ms(t) for t in frees.get((want["cluster"], want["node"]), ())
                 if _ms(t) > want["since"]]
        if later:
            want["since"] = max(later)


def node_records(rng: random.Random, clusters: Iterable[tuple[str, str]],
                 busy: dict[str, set[str]], start: float, end: float
                 ) -> tuple[list[GeneratedRecord], dict[str, dict[str, Any]]]:
    """The node records of ``clusters`` ((scheduler, cluster) pairs) between ``start`` and
    ``end``, none changing a host in ``busy[cluster]``, and the truth of every node."""
    records: list[GeneratedRecord] = []
    truth: dict[str, dict[str, Any]] = {}
    for scheduler, cluster in clusters:
        taken = {i for i in range(NODES)
                 if _host(cluster, scheduler, i) in busy.get(cluster, set())}
        plan = _plan(rng, taken, start, end)
        recs, by_index = (_flux if scheduler == "flux" else _slurm)(cluster, plan, start)
        records += recs
        for i, fields in by_index.items():
            host = _host(cluster, scheduler, i)
            truth[node_key(cluster, host)] = {"cluster": cluster, "scheduler": scheduler,
                                              "node": host, **fields}
    return records, truth
