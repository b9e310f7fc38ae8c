from hypothesis import given
from hypothesis import strategies as st

from pipeline.core.snapshots import UNKNOWN_REASON, JobSummary, build_snapshots, summarize


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
