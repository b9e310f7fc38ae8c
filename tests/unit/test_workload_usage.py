"""The synthetic workload's node samples (issue 33): payloads as the node edge sends them
(usage_contract), one per job per node per interval while it runs and a final one, and a
truth that follows from them. The truth is recomputed here from the records alone (the
samples, the journal's times), not from the generator's own helpers."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from typing import Any

import pytest

from pipeline.core.fluid import decode_jobid
from pipeline.core.model import RawRecord
from pipeline.fold import fold
from pipeline.parsers.normalize import normalize
from pipeline.tooling.bench.feed import workload_spec
from pipeline.tooling.workload import Workload, WorkloadSpec

START = 1_795_000_000.0
#: the payload's fields, as the contract lists them
CONTRACT_FIELDS = {
    "v", "scheduler", "job_id", "node", "reader", "sampled_at", "epoch", "run", "cpu_s",
    "cpu_user_s", "cpu_system_s", "interval_s", "cpu_interval_s", "mem_bytes",
    "mem_peak_bytes", "mem_rss_bytes", "mem_file_bytes", "mem_limit_bytes", "processes",
    "gpus", "gpu_busy_s", "gpu_s", "gpu_idle_since", "final", "reason",
}
GPU_FIELDS = {"index", "uuid", "util_pct", "mem_bytes", "mem_total_bytes"}
NULLABLE = {"interval_s", "cpu_interval_s", "mem_peak_bytes", "mem_rss_bytes",
            "mem_file_bytes", "mem_limit_bytes", "gpu_idle_since", "reason"}
COUNTERS = ("cpu_s", "cpu_user_s", "cpu_system_s", "mem_peak_bytes", "gpu_busy_s", "gpu_s")

Series = dict[str, dict[tuple[str, str, str], list[dict[str, Any]]]]


@pytest.fixture(scope="module")
def workload() -> Workload:
    return Workload(WorkloadSpec(seed=6, jobs=400, start=START, time_scale=0.05))


def samples_of(w: Workload) -> Series:
    """job key -> (node, epoch, run) -> its payloads in time order."""
    out: Series = defaultdict(lambda: defaultdict(list))
    for r in w.records():
        if r.format == "node-usage":
            s = json.loads(r.payload)
            out[r.key][(s["node"], s["epoch"], s["run"])].append(s)
    return out


def journal_times(w: Workload) -> dict[str, tuple[float, float]]:
    """Flux job key -> (alloc, end: finish or the first fatal exception) from its journal."""
    alloc: dict[str, float] = {}
    end: dict[str, float] = {}
    for r in w.records():
        if r.format != "flux-journal":
            continue
        (ev,) = json.loads(r.payload)["events"]
        fatal = ev["name"] == "exception" and ev["context"]["severity"] == 0
        if ev["name"] == "alloc":
            alloc[r.key] = ev["timestamp"]
        elif (ev["name"] == "finish" or fatal) and r.key not in end:
            end[r.key] = ev["timestamp"]
    return {k: (alloc[k], end[k]) for k in alloc}


def test_every_payload_is_the_contracts(workload: Workload) -> None:
    records = [r for r in workload.records() if r.format == "node-usage"]
    assert records
    for r in records:
        s = json.loads(r.payload)
        assert set(s) == CONTRACT_FIELDS, r.payload
        assert s["v"] == 1 and s["scheduler"] == r.scheduler
        assert s["reader"] in ("cgroup-v1", "cgroup-v2", "procs")
        # the key is the one the scheduler's own events have; the node saw F58 on Flux
        job_id = r.key.split(":", 1)[1]
        if r.scheduler == "flux":
            assert s["job_id"].startswith("ƒ") and str(decode_jobid(s["job_id"])) == job_id
        else:
            assert s["job_id"] == job_id and job_id.isdigit()
        assert r.time == s["sampled_at"] and r.key == f"{r.cluster}:{job_id}"
        assert s["node"] and "." not in s["node"]
        assert s["epoch"].startswith("cg" if s["reader"] != "procs" else "p")
        for name in CONTRACT_FIELDS - {"gpus", "final", "reason", "v", "scheduler",
                                       "job_id", "node", "reader", "epoch", "run"}:
            value = s[name]
            if value is None:
                assert name in NULLABLE, name
                continue
            assert isinstance(value, int | float) and not isinstance(value, bool), name
            assert math.isfinite(value) and value >= 0, (name, value)
        assert math.isclose(s["cpu_user_s"] + s["cpu_system_s"], s["cpu_s"], abs_tol=1e-6)
        assert s["gpu_busy_s"] <= s["gpu_s"] + 1e-9
        assert s["mem_peak_bytes"] >= s["mem_bytes"] or s["reader"] != "procs"
        if s["mem_limit_bytes"] is not None:
            assert s["mem_peak_bytes"] <= s["mem_limit_bytes"]
        for gpu in s["gpus"]:
            assert set(gpu) == GPU_FIELDS and 0 <= gpu["util_pct"] <= 100
        if s["gpu_idle_since"] is not None:
            assert s["gpus"] and all(g["util_pct"] < 5 for g in s["gpus"])
            assert s["gpu_idle_since"] <= s["sampled_at"]
        assert (s["reason"] is not None) == s["final"]


def test_one_sample_per_node_per_interval_while_it_runs_then_a_final_one(
        workload: Workload) -> None:
    interval = 30.0 * 0.05  # the default, in the jobs' own time scaled as their runs
    series = samples_of(workload)
    ran = {k for k, t in workload.truth.items() if not t["cancelled_before_start"]}
    assert set(series) == ran
    for key, counters in series.items():
        truth = workload.truth[key]
        # every node of the job, one counter each
        assert sorted(node for node, _, _ in counters) == sorted(truth["nodelist"])
        for samples in counters.values():
            assert [s["final"] for s in samples] == [False] * (len(samples) - 1) + [True]
            gaps = [round(b["sampled_at"] - a["sampled_at"], 3)
                    for a, b in zip(samples, samples[1:], strict=False)]
            assert all(g == pytest.approx(interval, abs=0.002) for g in gaps[:-1]), gaps
            assert 0 < gaps[-1] <= interval + 0.002 if gaps else True
            assert samples[0]["interval_s"] is None and samples[0]["cpu_interval_s"] is None
            for a, b in zip(samples, samples[1:], strict=False):
                assert b["interval_s"] == pytest.approx(b["sampled_at"] - a["sampled_at"],
                                                        abs=1e-6)
                assert b["cpu_interval_s"] == pytest.approx(b["cpu_s"] - a["cpu_s"],
                                                            abs=1e-6)
                for name in COUNTERS:  # cumulative within (epoch, run): never back
                    assert b[name] >= a[name], name
                if a["gpu_idle_since"] is not None and b["gpu_idle_since"] is not None:
                    # idle since the streak began, not since the latest sample
                    assert b["gpu_idle_since"] == a["gpu_idle_since"]


def test_the_truth_is_what_the_samples_give(workload: Workload) -> None:
    series = samples_of(workload)
    times = journal_times(workload)
    checked = 0
    for key, truth in workload.truth.items():
        counters = series.get(key, {})
        assert truth["usage_nodes"] == (len(counters) or None)
        if truth["scheduler"] == "slurm" or not counters:
            assert truth["usage_source"] == ("sacct" if counters else None)
            continue
        assert truth["usage_source"] == "node"
        latest = [samples[-1] for samples in counters.values()]
        alloc, end = times[key]
        run_s = (round(end * 1000) - round(alloc * 1000)) / 1000
        cpu = sum(s["cpu_s"] for s in latest)
        assert truth["cpu_eff_pct"] == pytest.approx(100 * cpu / (run_s * truth["ncores"]),
                                                     abs=1e-9)
        peaks = [100 * max(s["mem_peak_bytes"], s["mem_bytes"]) / s["mem_limit_bytes"]
                 for s in latest if s["mem_limit_bytes"]]
        if peaks:
            assert truth["mem_max_pct"] == pytest.approx(max(peaks), abs=1e-9)
        else:  # the procs reader knows no limit, nor does a Flux job's R
            assert truth["mem_max_pct"] is None
        gpu_s = sum(s["gpu_s"] for s in latest)
        if gpu_s:
            busy = sum(s["gpu_busy_s"] for s in latest)
            assert truth["gpu_util_pct"] == pytest.approx(100 * busy / gpu_s, abs=1e-9)
        else:
            assert truth["gpu_util_pct"] is None
        checked += 1
    assert checked > 100


def test_the_samples_show_every_usage_profile_on_both_schedulers(workload: Workload) -> None:
    seen: set[tuple[str, str]] = set()
    for key, counters in samples_of(workload).items():
        truth = workload.truth[key]
        for samples in counters.values():
            for s in samples:
                if s["interval_s"] and s["cpu_interval_s"] / s["interval_s"] \
                        < 0.1 * truth["ncores"] / truth["nnodes"]:
                    seen.add((truth["scheduler"], "cpu under 10 %"))
                if s["mem_limit_bytes"] and s["mem_bytes"] >= 0.9 * s["mem_limit_bytes"]:
                    seen.add((truth["scheduler"], "memory within 10 % of the limit"))
                if s["gpu_idle_since"] is not None:
                    seen.add((truth["scheduler"], "GPUs idle"))
                if s["gpus"] and min(g["util_pct"] for g in s["gpus"]) > 30:
                    seen.add((truth["scheduler"], "GPUs busy"))
                if s["interval_s"] and s["cpu_interval_s"] / s["interval_s"] \
                        > 0.6 * truth["ncores"] / truth["nnodes"]:
                    seen.add((truth["scheduler"], "cpu busy"))
    assert seen == {(sched, what) for sched in ("flux", "slurm") for what in (
        "cpu under 10 %", "memory within 10 % of the limit", "GPUs idle", "GPUs busy",
        "cpu busy")}


def test_slurm_samples_agree_with_sacct_within_a_few_points(workload: Workload) -> None:
    # a Slurm job's node samples are drawn at the levels its sacct steps state: the node
    # figures over sacct's own times agree with sacct's (the "within a few points")
    series = samples_of(workload)
    spans = {f"{r.cluster}:{job['job_id']}": job["time"] for r in workload.records()
             if r.format == "slurm-sacct" for job in json.loads(r.payload)["jobs"]}
    compared = 0
    for key, truth in workload.truth.items():
        if truth["usage_source"] != "sacct":
            continue
        latest = [samples[-1] for samples in series[key].values()]
        peaks = [100 * max(s["mem_peak_bytes"], s["mem_bytes"]) / s["mem_limit_bytes"]
                 for s in latest]
        assert max(peaks) == pytest.approx(truth["mem_max_pct"], abs=3.0)
        elapsed = spans[key]["end"] - spans[key]["start"]
        cpu = sum(s["cpu_s"] for s in latest)
        assert 100 * cpu / (elapsed * truth["ncores"]) == pytest.approx(
            truth["cpu_eff_pct"], abs=5.0), key
        compared += 1
    assert compared > 50


def test_running_jobs_show_their_usage_now_in_the_fold(workload: Workload) -> None:
    # cut the stream half-way: running jobs of both schedulers have figures so far
    records = list(workload.records())
    cut = records[len(records) // 2].time
    events = []
    for r in records:
        if r.time > cut:
            break
        events += normalize(RawRecord(r.cluster, r.scheduler, r.format, r.time,  # type: ignore[arg-type]
                                      r.payload, r.key))
    running = [d for d in fold(events) if d["state"] == "running"
               and d.get("usage_sampled_at") is not None]
    assert {d["scheduler"] for d in running} == {"flux", "slurm"}
    assert all(d["usage_nodes"] and d["usage_mem_mb"] > 0 for d in running)


def test_the_bench_feed_sends_no_node_samples() -> None:
    # the bench's figures (events per job, rates) stay the scheduler events' own
    spec = workload_spec(3, 50, 1000.0, 0.05, start=START)
    assert spec.usage_interval_s is None
    assert not any(r.format == "node-usage" for r in Workload(spec).records())


def test_the_interval_is_in_the_jobs_own_time() -> None:
    # 10 s at time scale 1 and 0.1: as many samples, ten times closer
    counts = []
    for scale in (1.0, 0.1):
        w = Workload(WorkloadSpec(seed=8, jobs=60, start=START, time_scale=scale,
                                  usage_interval_s=10.0))
        gaps = {round(b["sampled_at"] - a["sampled_at"], 3)
                for samples in (s for c in samples_of(w).values() for s in c.values())
                for a, b in zip(samples[:-1], samples[1:-1], strict=False)}
        assert gaps and all(g == pytest.approx(10.0 * scale, abs=0.002) for g in gaps)
        counts.append(sum(r.format == "node-usage" for r in w.records()))
    assert counts[0] == pytest.approx(counts[1], rel=0.1)
