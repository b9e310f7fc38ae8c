"""The synthetic workload: its records fold (offline, no service) into exactly its truth."""

from __future__ import annotations

import hashlib
import json
from collections import Counter

import pytest

from pipeline.core.model import RawRecord
from pipeline.fold import fold
from pipeline.parsers.normalize import normalize
from pipeline.tooling.verify import compare
from pipeline.tooling.workload import Workload, WorkloadSpec

START = 1_795_000_000.0


def folded(w: Workload) -> list[dict]:
    events = []
    for r in w.records():
        raw = RawRecord(r.cluster, r.scheduler, r.format, r.time, r.payload, r.key)  # type: ignore[arg-type]
        events += normalize(raw)
    return fold(events)


@pytest.mark.parametrize("seed", [1, 7, 42])
def test_the_records_fold_into_the_truth(seed: int) -> None:
    w = Workload(WorkloadSpec(seed=seed, jobs=300, start=START, time_scale=0.05))
    result = compare(w.truth, folded(w))
    assert result.missing == [] and result.unexpected == [] and result.duplicated == []
    assert result.field_errors == Counter(), result.examples
    assert result.ok


def test_every_result_and_both_schedulers_occur() -> None:
    w = Workload(WorkloadSpec(seed=3, jobs=600, start=START))
    results = Counter((t["scheduler"], t["result"]) for t in w.truth.values())
    for sched in ("flux", "slurm"):
        for result in ("completed", "failed", "timeout", "cancelled", "node_fail", "oom"):
            assert results[(sched, result)] > 0, (sched, result)


def test_records_come_in_time_order_and_keyed_by_job() -> None:
    w = Workload(WorkloadSpec(seed=5, jobs=100, start=START))
    times = [r.time for r in w.records()]
    assert times == sorted(times)
    assert {r.key for r in w.records()} == set(w.truth)


def test_a_later_run_never_reuses_a_job_id() -> None:
    # Same seed, started when the first run's last job was submitted: ids still differ.
    first = Workload(WorkloadSpec(seed=9, jobs=200, start=START))
    last_submit = max(r.time for r in first.records() if r.format in ("flux-journal",
                                                                      "slurm-squeue"))
    second = Workload(WorkloadSpec(seed=9, jobs=200, start=float(int(last_submit)) + 1))
    assert not set(first.truth) & set(second.truth)


def test_compare_reports_what_differs() -> None:
    w = Workload(WorkloadSpec(seed=2, jobs=20, start=START, time_scale=0.05))
    docs = folded(w)
    extra = {**docs[1], "job_id": "999999"}
    result = compare(w.truth, [*docs[1:], docs[1], extra])
    assert not result.ok
    assert result.missing == [f"{docs[0]['cluster']}:{docs[0]['job_id']}"]
    assert result.duplicated == [f"{docs[1]['cluster']}:{docs[1]['job_id']}"]
    assert result.unexpected == [f"{extra['cluster']}:999999"]
    assert result.full_matches == result.key_matches == 19

    changed = compare(w.truth, [{**docs[0], "result": "weird"}, {**docs[1], "bank": "x"},
                                *docs[2:]])
    assert not changed.ok
    assert changed.field_errors == Counter({"result": 1, "bank": 1})
    assert changed.key_matches == 19 and changed.full_matches == 18
    assert changed.examples[0][1:] == ("result", "weird", docs[0]["result"])


def test_jobs_wait_for_a_mix_of_reasons_checked_against_the_truth() -> None:
    w = Workload(WorkloadSpec(seed=3, jobs=2000, start=START))
    polled = Counter(json.loads(r.payload)["jobs"][0]["state_reason"] for r in w.records()
                     if r.format == "slurm-squeue")
    assert {"Priority", "Resources", "Dependency", "JobHeldUser"} <= set(polled)
    kept = Counter((t["scheduler"], t["pending_reason"]) for t in w.truth.values()
                   if t["pending_reason"] is not None)
    assert {("flux", "held"), ("flux", "dependency"), ("flux", "resources"),
            ("slurm", "Priority"), ("slurm", "Resources")} <= set(kept)
    # only jobs cancelled while pending keep one; every job that ran has none
    assert all(t.get("cancelled_before_start") for t in w.truth.values()
               if t["pending_reason"] is not None)


def test_pending_jobs_mid_workload_all_say_why_they_wait() -> None:
    w = Workload(WorkloadSpec(seed=4, jobs=400, start=START))
    cut = START + 40
    events = []
    for r in w.records():
        if r.time > cut:
            break
        events += normalize(RawRecord(r.cluster, r.scheduler, r.format, r.time, r.payload,  # type: ignore[arg-type]
                                      r.key))
    # (a Flux job submitted in the last instant is not validated yet: no reason in NEW)
    pending = [d for d in fold(events)
               if d["state"] == "pending" and d["t_submit"] < (cut - 0.1) * 1000]
    reasons = Counter((d["scheduler"], d["pending_reason"]) for d in pending)
    assert len(pending) > 20 and all(reason for _, reason in reasons), reasons
    assert {("flux", "held"), ("flux", "resources"), ("slurm", "Priority"),
            ("slurm", "Resources")} <= set(reasons), reasons


def _main_records_digest(w: Workload) -> str:
    digest = hashlib.sha256()
    for r in w.records():
        if r.format not in ("slurm-sacct", "node-usage"):
            digest.update(repr((r.time, r.cluster, r.format, r.key)).encode() + r.payload)
    return digest.hexdigest()


def test_a_seeds_jobs_are_unchanged_by_the_sacct_and_node_usage_records() -> None:
    # seed 1's records before sacct was added (commit c6e0c67's workload): usage and node
    # samples draw from their own streams, and their records do not count towards Flux ids
    # or tie order
    w = Workload(WorkloadSpec(seed=1, jobs=200, start=START))
    assert any(r.format == "node-usage" for r in w.records())
    assert _main_records_digest(w) == \
        "431ccf70a13886c3e79f3a7e7b1925a39da7e4a3622a7a9d66a540a1d1e7a44d"


def test_slurm_jobs_that_ran_have_a_mix_of_usage_in_the_truth() -> None:
    w = Workload(WorkloadSpec(seed=3, jobs=1000, start=START))
    sacct = [json.loads(r.payload)["jobs"][0] for r in w.records()
             if r.format == "slurm-sacct"]
    ran = [t for t in w.truth.values()
           if t["scheduler"] == "slurm" and not t["cancelled_before_start"]]
    assert len(sacct) == len(ran) > 300
    assert all(s["steps"] and s["tres"]["allocated"] for s in sacct)
    cpu = [t["cpu_eff_pct"] for t in ran]
    mem = [t["mem_max_pct"] for t in ran]
    assert all(0 < c <= 100 for c in cpu) and all(0 < m <= 100 for m in mem)
    assert sum(c < 10 for c in cpu) > 50  # idle
    assert sum(c > 60 for c in cpu) > 100  # efficient
    assert sum(m > 75 for m in mem) > 50  # memory heavy
    assert all(t["mem_max_pct"] > 95 for t in ran if t["result"] == "oom")
    gpu = [t for t in ran if t["ngpus"]]
    accounted = [t["gpu_util_pct"] for t in gpu if t["gpu_util_pct"] is not None]
    assert 0 < len(accounted) < len(gpu)
    assert any(u < 10 for u in accounted) and any(u > 40 for u in accounted)
    # no usage where the source has none: never started, no GPU
    assert all(t["cpu_eff_pct"] is None and t["mem_max_pct"] is None
               and t["usage_source"] is None
               for t in w.truth.values() if t["cancelled_before_start"])
    assert all(t["gpu_util_pct"] is None for t in ran if not t["ngpus"])
    # sacct's figures are the final ones of every Slurm job that ran
    assert {t["usage_source"] for t in ran} == {"sacct"}


def test_without_node_samples_flux_jobs_have_no_usage() -> None:
    w = Workload(WorkloadSpec(seed=3, jobs=200, start=START, usage_interval_s=None))
    assert not any(r.format == "node-usage" for r in w.records())
    flux = [t for t in w.truth.values() if t["scheduler"] == "flux"]
    assert flux and all(t["cpu_eff_pct"] is None and t["mem_max_pct"] is None
                        and t["gpu_util_pct"] is None and t["usage_source"] is None
                        and t["usage_nodes"] is None for t in flux)
    slurm = [t for t in w.truth.values()
             if t["scheduler"] == "slurm" and not t["cancelled_before_start"]]
    assert {(t["usage_source"], t["usage_nodes"]) for t in slurm} == {("sacct", None)}
    # the other records are those of the same seed with samples
    with_samples = Workload(WorkloadSpec(seed=3, jobs=200, start=START))
    assert [r for r in with_samples.records() if r.format != "node-usage"] == \
        list(w.records())
    result = compare(w.truth, folded(w))
    assert result.ok, (result.field_errors, result.examples)


def test_usage_is_checked_against_the_truth_within_rounding() -> None:
    w = Workload(WorkloadSpec(seed=2, jobs=40, start=START, time_scale=0.05))
    docs = folded(w)
    slurm = next(i for i, d in enumerate(docs) if d["cpu_eff_pct"] is not None)
    near = {**docs[slurm], "cpu_eff_pct": docs[slurm]["cpu_eff_pct"] + 1e-9}
    assert compare(w.truth, [*docs[:slurm], near, *docs[slurm + 1:]]).ok
    off = {**docs[slurm], "mem_max_pct": docs[slurm]["mem_max_pct"] + 0.5}
    result = compare(w.truth, [*docs[:slurm], off, *docs[slurm + 1:]])
    assert result.field_errors == Counter({"mem_max_pct": 1})
    lost = {**docs[slurm], "cpu_eff_pct": None}
    assert compare(w.truth, [*docs[:slurm], lost, *docs[slurm + 1:]]).field_errors == \
        Counter({"cpu_eff_pct": 1})


def test_node_usage_is_checked_against_the_truth() -> None:
    w = Workload(WorkloadSpec(seed=2, jobs=40, start=START, time_scale=0.05))
    docs = folded(w)
    i = next(i for i, d in enumerate(docs) if d["usage_source"] == "node"
             and d["cpu_eff_pct"] is not None)

    def errors(**change: object) -> Counter[str]:
        return compare(w.truth, [*docs[:i], {**docs[i], **change}, *docs[i + 1:]]).field_errors

    assert errors() == Counter()
    assert errors(cpu_eff_pct=docs[i]["cpu_eff_pct"] + 1e-9) == Counter()
    # a lost final sample moves a figure by 0.05 points or more (verify.TOLERANCES)
    assert errors(cpu_eff_pct=docs[i]["cpu_eff_pct"] - 0.05) == Counter({"cpu_eff_pct": 1})
    assert errors(usage_source="sacct") == Counter({"usage_source": 1})
    assert errors(usage_nodes=docs[i]["usage_nodes"] + 1) == Counter({"usage_nodes": 1})
