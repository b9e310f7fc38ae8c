"""Indices full of what the real pipeline makes of a synthetic workload, for dashboard tests.

The workload generator's records due up to "now" go through the real stages: parsed by
``parse_record`` (events), folded by ``fold``/``JobFold`` (job documents), summarised by
``build_snapshots`` every snapshot interval (queue snapshots, as one worker takes them),
turned into bulk actions by the sink's ``Converter`` and written by its ``BulkClient``.
Records due later are not delivered, so at "now" some jobs wait and some run.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from elasticsearch import Elasticsearch

from pipeline.core.model import JobEvent
from pipeline.core.snapshots import build_snapshots, summarize
from pipeline.fold import JobFold
from pipeline.parsers import parse_record
from pipeline.sink.client import BulkClient
from pipeline.sink.converter import Action, Converter
from pipeline.sink.names import Family, alias_name
from pipeline.sink.templates import ensure_indices
from pipeline.tooling.workload import Workload, WorkloadSpec

SNAPSHOT_INTERVAL_S = 30.0


@dataclass
class Indexed:
    """What was written, for the tests' own expectations."""

    events: list[JobEvent]
    jobs: list[dict[str, Any]]
    snapshots: list[dict[str, Any]]

    def states(self) -> Counter[str]:
        return Counter(str(d["state"]) for d in self.jobs)


def pipeline_output(spec: WorkloadSpec, now: float) -> Indexed:
    """Events, final job documents and snapshots of ``spec``'s records due by ``now``."""
    folds: dict[str, JobFold] = {}
    summaries: dict[str, Any] = {}
    events: list[JobEvent] = []
    snapshots: list[dict[str, Any]] = []
    next_snapshot: float | None = None

    def take_snapshots(until: float) -> None:
        nonlocal next_snapshot
        while next_snapshot is not None and next_snapshot <= until:
            snapshots.extend(build_snapshots(summaries.values(), next_snapshot, "w1", [0],
                                             SNAPSHOT_INTERVAL_S))
            next_snapshot += SNAPSHOT_INTERVAL_S

    for rec in Workload(spec).records():
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
    return Indexed(events, jobs, snapshots)


def index_all(es: Elasticsearch, prefix: str, data: Indexed) -> None:
    """Create the indices with the sink's templates and bulk-write ``data`` into them."""
    ensure_indices(es, prefix, "v1")
    conv = Converter(prefix, "v1")
    actions: list[Action] = [conv.job(d) for d in data.jobs]
    actions += [conv.event(e.to_dict()) for e in data.events]
    actions += [conv.snapshot(s) for s in data.snapshots]
    _write(BulkClient(es), actions)
    es.indices.refresh(index=",".join(alias_name(prefix, f) for f in Family))


def _write(bulk: BulkClient, actions: Iterable[Action]) -> None:
    results = bulk.write(list(actions))
    refused = [r for r in results if not r.outcome.done]
    assert not refused, f"{len(refused)} documents refused, first: {refused[0]}"
