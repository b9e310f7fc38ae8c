"""The synthetic workload's nodes (``WorkloadSpec.node_events``, issue 36): the records the
Flux and Slurm edges publish of every node, parsed and folded as the worker does, give the
node truth; they change none of a seed's job records, and never touch a long job's node."""

from __future__ import annotations

from collections import Counter

import pytest

from pipeline.core.nodes import NodeEvent, node_key
from pipeline.fold.nodes import fold_nodes
from pipeline.parsers import parse_record
from pipeline.parsers.flux_resource import allocation_events
from pipeline.tooling.demo import DemoOptions
from pipeline.tooling.verify import compare_nodes
from pipeline.tooling.workload import GeneratedRecord, Workload, WorkloadSpec
from pipeline.tooling.workload_nodes import DOWN, DRAINED, NODES, RESUMED

START = 1_795_000_000.0
NODE_FORMATS = ("flux-resource-journal", "slurm-nodes")


def _workload(seed: int, **kw: object) -> Workload:
    return Workload(WorkloadSpec(seed=seed, jobs=120, start=START, long_jobs=6, **kw))


def _node_records(w: Workload) -> list[GeneratedRecord]:
    return [r for r in w.records() if r.format in NODE_FORMATS]


def _documents(records: list[GeneratedRecord]) -> list[dict[str, object]]:
    """The node documents of the node records, and of the Flux jobs' allocations among
    ``records`` as the worker derives them (agents/jobs.py, "Allocations")."""
    events = [ev for r in records
              for ev in parse_record(r.format, r.payload, cluster=r.cluster, received_at=r.time)]
    nodes = [ev for ev in events if isinstance(ev, NodeEvent)]
    return fold_nodes(nodes + allocation_events(ev for ev in events
                                                if not isinstance(ev, NodeEvent)))


@pytest.mark.parametrize("seed", [1, 2, 7])
def test_the_node_records_fold_into_the_node_truth(seed: int) -> None:
    w = _workload(seed, node_events=True)
    result = compare_nodes(w.node_truth, _documents(list(w.records())))
    assert result.ok, (result.missing, result.unexpected, result.examples)
    assert result.expected == 2 * NODES
    states = Counter((t["scheduler"], t["state"]) for t in w.node_truth.values())
    for scheduler in ("flux", "slurm"):
        assert states[(scheduler, "drained")] == DRAINED  # the resumed are up again
        assert states[(scheduler, "down")] == DOWN
        assert states[(scheduler, "up")] == NODES - DRAINED - DOWN
    drained = [t for t in w.node_truth.values() if t["drained"]]
    assert all(t["reason"] for t in drained)
    assert {t["reason_by"] for t in drained} == {None, "root"}  # Flux names no user


def test_a_resumed_node_is_up_again_since_its_resume() -> None:
    w = _workload(3, node_events=True)
    docs = {node_key(d["cluster"], d["node"]): d for d in _documents(_node_records(w))}
    resumed = [k for k, d in docs.items() if d["state"] == "up" and d["state_s"]["drained"] > 0]
    assert len(resumed) == 2 * RESUMED
    assert all(docs[k]["since"] == w.node_truth[k]["since"] for k in resumed)


def test_node_events_change_no_job_record_nor_truth() -> None:
    with_nodes, without = _workload(5, node_events=True), _workload(5)
    assert [r for r in with_nodes.records() if r.format not in NODE_FORMATS] == \
        list(without.records())
    assert with_nodes.truth == without.truth and not without.node_truth
    assert with_nodes.event_ids() == without.event_ids()  # node records hold no job event
    times = [r.time for r in with_nodes.records()]
    assert times == sorted(times)


def test_no_long_job_runs_on_a_node_that_changes() -> None:
    w = _workload(4, node_events=True)
    long_hosts = {(t["cluster"], h) for t in w.truth.values() if "long_job_profile" in t
                  for h in t["nodelist"]}
    assert long_hosts
    changed = {(t["cluster"], t["node"]) for t in w.node_truth.values()
               if t["state"] != "up" or t["since"] > START * 1000}
    assert changed and not changed & long_hosts


def test_compare_nodes_reports_what_differs() -> None:
    w = _workload(6, node_events=True)
    docs = _documents(_node_records(w))
    drained = next(d for d in docs if d["state"] == "drained")
    drained["reason"] = "something else"
    result = compare_nodes(w.node_truth, docs[1:] if docs[0] is not drained else docs[2:])
    assert not result.ok and result.missing and result.field_errors["reason"] == 1


def test_the_demo_sends_node_events() -> None:
    assert DemoOptions().spec().node_events and WorkloadSpec().node_events is False
