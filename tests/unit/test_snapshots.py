from collections import Counter
from functools import cache

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.snapshots import (
    NODE_QUEUE,
    UNKNOWN_REASON,
    JobSummary,
    NodeSummary,
    build_node_snapshots,
    build_snapshots,
    summarize,
    summarize_node,
)


def doc(state, queue="batch", **kw):
    return {"cluster": "c", "queue": queue, "state": state, "t_submit": 1_000_000, **kw}


def test_pending_counts_requested_running_counts_allocated():
    jobs = [summarize(doc("pending", nodes_req=2, cores_req=8, timelimit_s=3600)),
            summarize(doc("running", nodes_req=9, nnodes=1, ncores=4, ngpus=2)),
            summarize(doc("done", nnodes=5))]
    snap, by_reason = build_snapshots(jobs, now=1060.0, worker="w1", partitions=[0, 1],
                                      interval_s=30)
    assert snap["reason"] is None and (snap["reason_jobs"], snap["reason_cores"]) == (0, 0)
    assert (by_reason["reason"], by_reason["reason_jobs"], by_reason["reason_cores"]) == (
        UNKNOWN_REASON, 1, 8)
    assert snap["timestamp"] == 1050_000
    assert (snap["pending_jobs"], snap["pending_cores"], snap["pending_nodes"]) == (1, 8, 2)
    assert snap["pending_node_hours"] == 2.0
    assert (snap["running_jobs"], snap["running_cores"], snap["running_gpus"]) == (1, 4, 2)
    assert snap["oldest_pending_age_s"] == 50.0


jobs_st = st.lists(st.builds(
    JobSummary, cluster=st.sampled_from(["a", "b"]), queue=st.sampled_from(["q1", "q2"]),
    state=st.sampled_from(["pending", "running", "completing", "done"]),
    nodes=st.integers(0, 4), cores=st.integers(0, 64), gpus=st.integers(0, 8),
    t_submit_ms=st.integers(0, 10**6), timelimit_s=st.floats(0, 1e5),
    reason=st.sampled_from([None, "Priority", "Resources", "held"])))


def test_reason_snapshots_split_a_queues_pending_jobs_by_reason():
    jobs = [summarize(doc("pending", cores_req=4, pending_reason="Priority")),
            summarize(doc("pending", cores_req=2, pending_reason="Priority")),
            summarize(doc("pending", cores_req=8, pending_reason="Resources")),
            summarize(doc("pending", queue="debug", cores_req=1, pending_reason="held")),
            summarize(doc("running", ncores=16, pending_reason=None)),
            # a done job keeps the reason it waited for: it is not pending any more
            summarize(doc("done", cores_req=1, pending_reason="JobHeldUser"))]
    snaps = build_snapshots(jobs, 2000.0, "w1", [0], 30)
    assert [(s["queue"], s["reason"]) for s in snaps] == [
        ("batch", None), ("batch", "Priority"), ("batch", "Resources"),
        ("debug", None), ("debug", "held")]
    rows = {(s["queue"], s["reason"]): s for s in snaps}
    assert (rows["batch", "Priority"]["reason_jobs"], rows["batch", "Priority"]["reason_cores"]
            ) == (2, 6)
    assert rows["batch", "Resources"]["reason_cores"] == 8
    assert rows["batch", None]["pending_jobs"] == 3 and rows["batch", None]["running_jobs"] == 1
    for s in snaps:
        if s["reason"] is not None:  # adds nothing to the queue's sums, nor to its max age
            assert s["oldest_pending_age_s"] is None
            assert all(v == 0 for k, v in s.items() if k.startswith(("pending_", "running_")))


@given(jobs_st)
def test_reasons_add_up_to_the_pending_jobs_and_cores(jobs):
    snaps = build_snapshots(jobs, 2000.0, "w", [0], 30)
    for queue in (s for s in snaps if s["reason"] is None):
        mine = [s for s in snaps if s["reason"] is not None
                and (s["cluster"], s["queue"]) == (queue["cluster"], queue["queue"])]
        assert sum(s["reason_jobs"] for s in mine) == queue["pending_jobs"]
        assert sum(s["reason_cores"] for s in mine) == queue["pending_cores"]


@given(jobs_st, st.integers(1, 4))
def test_sum_over_workers_equals_one_worker(jobs, nworkers):
    """Jobs split over workers by partition: summed snapshots equal the single-worker one."""
    whole = {(s["cluster"], s["queue"], s["reason"]): s for s in
             build_snapshots(jobs, 2000.0, "all", [0], 30)}
    parts: dict = {}
    for w in range(nworkers):
        mine = [j for i, j in enumerate(jobs) if i % nworkers == w]
        for s in build_snapshots(mine, 2000.0, f"w{w}", [w], 30):
            acc = parts.setdefault((s["cluster"], s["queue"], s["reason"]), {})
            for k, v in s.items():
                if k.startswith(("pending_", "running_", "reason_")):
                    acc[k] = acc.get(k, 0) + v
                elif k == "oldest_pending_age_s" and v is not None:
                    acc[k] = max(acc.get(k, 0), v)
    assert parts.keys() == whole.keys()
    for q, acc in parts.items():
        for k, v in acc.items():
            assert abs(v - whole[q][k]) < 1e-6 * max(1, abs(v))


# ------------------------------------------------------------------ node rows


@cache
def workload_node_docs() -> list[dict]:
    """The node documents of the demo workload's Flux and Slurm clusters at its end:
    drained, resumed and down nodes with their reasons."""
    import random

    from pipeline.fold.nodes import fold_nodes
    from pipeline.parsers import parse_record
    from pipeline.tooling.workload_nodes import node_records

    records, _ = node_records(random.Random(5), [("flux", "fa"), ("slurm", "sb")], {},
                              1_795_000_000.0, 1_795_003_600.0)
    return fold_nodes(ev for r in records for ev in parse_record(
        r.format, r.payload, cluster=r.cluster, received_at=r.time))


def test_node_rows_count_each_clusters_nodes_by_state_and_reason():
    docs = workload_node_docs()
    rows = build_node_snapshots(map(summarize_node, docs), now=1060.0, worker="w1",
                                partitions=[3, 1], interval_s=30)
    want = Counter((d["cluster"], d["state"], d["reason"] or None) for d in docs)
    assert {(r["cluster"], r["node_state"], r["node_reason"]): r["node_count"]
            for r in rows} == want
    # both schedulers, drained and down with their reasons, up without
    assert {(c, s) for c, s, _ in want} >= {("fa", "drained"), ("fa", "down"), ("fa", "up"),
                                          ("sb", "drained"), ("sb", "down"), ("sb", "up")}
    assert all(reason for c, s, reason in want if s == "drained")
    assert [(r["cluster"], r["node_state"]) for r in rows] == sorted(
        (r["cluster"], r["node_state"]) for r in rows)
    for r in rows:
        assert (r["timestamp"], r["worker"], r["partitions"]) == (1050_000, "w1", [1, 3])
        assert r["node_s"] == 30.0 * r["node_count"]
        # no queue, and nothing added to the queues' sums, nor a reason snapshot's
        assert r["queue"] == NODE_QUEUE and r["reason"] is None
        assert r["oldest_pending_age_s"] is None
        assert all(v == 0 for k, v in r.items() if k.startswith(("pending_", "running_",
                                                                   "reason_")))


def test_a_node_without_a_reason_has_none_and_an_empty_one_is_none():
    assert summarize_node({"cluster": "c", "state": "up", "reason": ""}) == NodeSummary(
        "c", "up", None)
    rows = build_node_snapshots([NodeSummary("c", "drained", None),
                                 NodeSummary("c", "drained", "fans"),
                                 NodeSummary("c", "drained", "fans")], 0.0, "w", [0], 10)
    assert [(r["node_reason"], r["node_count"], r["node_s"]) for r in rows] == [
        (None, 1, 10.0), ("fans", 2, 20.0)]
    assert build_node_snapshots([], 0.0, "w", [0], 10) == []


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 4), st.integers(0, 2**16))
def test_node_rows_of_workers_add_up_to_one_workers(nworkers, seed):
    """Nodes split over workers by partition, as the worker's table splits them (murmur2
    of cluster:node): the sum of their rows is the single worker's, count and seconds."""
    from agents.routing import job_partition

    docs = workload_node_docs()
    partitions = 1 + seed % 7
    whole = {(r["cluster"], r["node_state"], r["node_reason"]): r for r in
             build_node_snapshots(map(summarize_node, docs), 2000.0, "all", [0], 30)}
    acc: Counter = Counter()
    seconds: Counter = Counter()
    for w in range(nworkers):
        mine = [d for d in docs if job_partition(
            f"{d['cluster']}:{d['node']}".encode(), partitions) % nworkers == w]
        for r in build_node_snapshots(map(summarize_node, mine), 2000.0, f"w{w}", [w], 30):
            key = (r["cluster"], r["node_state"], r["node_reason"])
            acc[key] += r["node_count"]
            seconds[key] += r["node_s"]
    assert acc == Counter({k: r["node_count"] for k, r in whole.items()})
    assert seconds == Counter({k: r["node_s"] for k, r in whole.items()})
