"""The synthetic workload's node samples (issue 33): payloads as the node edge sends them
(usage_contract), one per job per node per interval while it runs and a final one, and a
truth that follows from them. The truth is recomputed here from the records alone (the
samples, the journal's times), not from the generator's own helpers. The long jobs
(``long_jobs``: running since 1-2 hours before the workload, still running at its end) are
told apart by their records too (events dated before the start), and judged by what the
overview's "now" panels would find in their folded documents at the last record."""

from __future__ import annotations

import json
import math
import time
from collections import Counter, defaultdict
from typing import Any

import pytest

from pipeline.core.fluid import decode_jobid
from pipeline.core.model import RawRecord
from pipeline.dashboards.overview import GPU_IDLE_DEFAULT, MEMORY_NEAR_PCT, WASTE_PCT
from pipeline.fold import doc_id, fold
from pipeline.parsers import NODE_FORMATS
from pipeline.parsers.normalize import normalize
from pipeline.tooling.bench.feed import feed_of, raw_record, workload_spec
from pipeline.tooling.demo import DemoOptions
from pipeline.tooling.verify import compare
from pipeline.tooling.workload import (
    ID_EPOCH,
    SLURM_IDS_PER_S,
    GeneratedRecord,
    Workload,
    WorkloadSpec,
)

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
        check_payload(r)


def check_payload(r: GeneratedRecord) -> None:
    """One node-usage record is the contract's payload, and agrees with itself."""
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


def test_the_bench_feed_sends_no_node_samples_nor_long_jobs() -> None:
    # the bench's figures (events per job, rates) stay the scheduler events' own: nothing
    # due before the start, every job ends
    spec = workload_spec(3, 50, 1000.0, 0.05, start=START)
    assert spec.usage_interval_s is None and spec.long_jobs == 0
    w = Workload(spec)
    assert not any(r.format == "node-usage" for r in w.records())
    assert all(r.time >= START for r in w.records())
    assert {t["state"] for t in w.truth.values()} == {"done"}


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


# -- the long jobs: running since before the workload, still running at its end -----------

#: the demo's time scale and long jobs (DemoOptions' defaults)
DEMO_SCALE = 0.04
LONG = 6
#: ending events: none of a long job's
ENDS = {"finish", "exception", "end", "release", "free", "clean", "epilog-start"}


@pytest.fixture(scope="module")
def long_workload() -> Workload:
    """A demo's workload: every other job ends before the records do."""
    return Workload(WorkloadSpec(seed=6, jobs=300, start=START, time_scale=DEMO_SCALE,
                                 long_jobs=LONG))


def events_by_job(w: Workload) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = defaultdict(list)
    for r in w.records():
        if r.format not in NODE_FORMATS:  # the demo's nodes: tests/unit/test_workload_nodes
            out[r.key] += normalize(raw_record(r))
    return out


def long_keys(w: Workload) -> set[str]:
    """The jobs with an event before the workload's start: from the records alone."""
    return {key for key, evs in events_by_job(w).items()
            if any(ev.timestamp < w.spec.start for ev in evs)}


def the_end(w: Workload) -> tuple[float, dict[str, dict[str, Any]]]:
    """The time of the last record, and every job's document then (the offline fold)."""
    records = [r for r in w.records() if r.format not in NODE_FORMATS]
    return records[-1].time, dict(feed_of(w.spec, records, w.truth).documents)


def cpu_panel(d: dict[str, Any]) -> bool:
    """The overview's 'Running jobs under 10 % of their cores now' query on a document."""
    return d["state"] == "running" and d["usage_cpu_now_pct"] is not None \
        and d["usage_cpu_now_pct"] < WASTE_PCT


def gpu_panel(d: dict[str, Any], now: float) -> bool:
    """'GPU jobs idle for $gpu_idle_min minutes': idle since before now - 15 minutes."""
    return d["state"] == "running" and d["usage_gpu_idle_since"] is not None \
        and d["usage_gpu_idle_since"] < (now - int(GPU_IDLE_DEFAULT) * 60) * 1000


def memory_panel(d: dict[str, Any]) -> bool:
    """'Jobs within 10 % of their memory limit now'."""
    return d["state"] == "running" and d["usage_mem_now_pct"] is not None \
        and d["usage_mem_now_pct"] >= MEMORY_NEAR_PCT


def test_the_long_jobs_started_hours_before_the_workload_and_never_end(
        long_workload: Workload) -> None:
    w = long_workload
    keys = long_keys(w)
    assert len(keys) == LONG
    assert {w.truth[k]["scheduler"] for k in keys} == {"flux", "slurm"}
    events = events_by_job(w)
    for key in keys:
        evs = events[key]
        starts = [ev.timestamp for ev in evs if ev.event == "start"]
        submits = [ev.timestamp for ev in evs if ev.event == "submit"]
        # started 1 to 2 real hours before (not scaled), submitted before that
        assert starts and START - 7200 <= min(starts) <= START - 3600, key
        assert submits and min(submits) < min(starts)
        assert not {ev.event for ev in evs} & ENDS, key
    # what the edges deliver of their past is due at the start and comes first: the demo
    # paces from the first record, so none waits an hour
    records = list(w.records())
    past = [r for r in records if r.format != "node-usage" and r.key in keys]
    assert {r.time for r in past} == {START}
    assert all(r.time >= START for r in records)
    later = next(i for i, r in enumerate(records) if r.time > START)
    assert all(r in records[:later] for r in past)
    # the other jobs are all over before the records end (the demo's situation)
    assert all(t["state"] == "done" for k, t in w.truth.items() if k not in keys)


def test_the_long_jobs_are_sampled_every_interval_through_the_workload(
        long_workload: Workload) -> None:
    w = long_workload
    keys = long_keys(w)
    interval = 30.0 * DEMO_SCALE  # on the clock of every other job's samples
    others_end = max(r.time for r in w.records() if r.key not in keys)
    series = samples_of(w)
    for key in keys:
        # every node of the job, one counter each
        assert sorted(n for n, _, _ in series[key]) == sorted(w.truth[key]["nodelist"])
        for samples in series[key].values():
            times = [s["sampled_at"] for s in samples]
            assert START <= times[0] <= START + interval + 0.001
            assert others_end - interval - 0.001 <= times[-1] <= others_end
            gaps = [round(b - a, 3) for a, b in zip(times, times[1:], strict=False)]
            assert gaps and all(g == pytest.approx(interval, abs=0.002) for g in gaps)
            assert not any(s["final"] for s in samples)
            # the edge sampled them before the records begin: the first interval is known
            # and the counters count from the job's start
            assert all(s["interval_s"] is not None for s in samples)
            assert samples[0]["cpu_s"] > samples[0]["cpu_interval_s"] * 100
            for a, b in zip(samples, samples[1:], strict=False):
                assert b["cpu_interval_s"] == pytest.approx(b["cpu_s"] - a["cpu_s"],
                                                            abs=1e-6)
                for name in COUNTERS:
                    assert b[name] >= a[name], name
    for r in w.records():
        if r.format == "node-usage" and r.key in keys:
            check_payload(r)


def test_at_the_end_the_long_jobs_fill_the_overview_now_panels(
        long_workload: Workload) -> None:
    w = long_workload
    keys = long_keys(w)
    now, docs = the_end(w)
    profile = {k: w.truth[k]["long_job_profile"] for k in keys}
    for key in keys:
        d = docs[key]
        assert d["state"] == "running" and d["t_end"] is None
        assert d["usage_cpu_now_pct"] is not None and d["usage_mem_now_pct"] is not None
        assert d["usage_sampled_at"] >= (now - 30.0 * DEMO_SCALE) * 1000
    # every other job is done: what the panels show at the end is the long jobs
    assert {k for k, d in docs.items() if d["state"] != "done"} == keys
    assert {k for k, d in docs.items() if cpu_panel(d)} == {
        k for k, p in profile.items() if p == "idle"}
    assert {k for k, d in docs.items() if memory_panel(d)} == {
        k for k, p in profile.items() if p == "memory"}
    gpu_idle = {k for k, d in docs.items() if gpu_panel(d, now)}
    assert gpu_idle == {k for k, p in profile.items() if p == "gpu_idle"}
    assert {w.truth[k]["scheduler"] for k in gpu_idle} == {"flux", "slurm"}
    for key in gpu_idle:
        # idle since the job's first sample (within an interval of its start), an hour
        # before the workload's start
        assert docs[key]["usage_gpu_idle_since"] <= docs[key]["t_start"] + 30.0 * DEMO_SCALE * 1000
        assert docs[key]["usage_gpu_idle_since"] < (START - 3600 + 1) * 1000
    # the busy one in none; its GPUs are busy now
    (busy,) = [k for k, p in profile.items() if p == "busy"]
    assert docs[busy]["usage_gpu_now_pct"] > 30 and docs[busy]["usage_cpu_now_pct"] > 60


def test_the_long_jobs_last_samples_give_the_panels_conditions(
        long_workload: Workload) -> None:
    # the same from the payloads themselves, not the fold
    w = long_workload
    keys = long_keys(w)
    now = max(r.time for r in w.records())
    for key, counters in samples_of(w).items():
        if key not in keys:
            continue
        truth, last = w.truth[key], [samples[-1] for samples in counters.values()]
        cores = truth["ncores"] / truth["nnodes"]
        cpu_pct = 100 * sum(s["cpu_interval_s"] / s["interval_s"] for s in last) / \
            truth["ncores"]
        mem_pct = max(100 * s["mem_bytes"] / s["mem_limit_bytes"] for s in last)
        idle = [s["gpu_idle_since"] for s in last]
        profile = truth["long_job_profile"]
        assert (cpu_pct < 10) == (profile == "idle"), (key, cpu_pct)
        assert (mem_pct >= 90) == (profile == "memory"), (key, mem_pct)
        assert (all(t is not None and t < now - 900 for t in idle)) == (
            profile == "gpu_idle"), (key, idle)
        assert all(len(s["gpus"]) == truth["ngpus"] / truth["nnodes"] for s in last)
        assert cores == 32


def test_the_long_jobs_truth_says_they_run(long_workload: Workload) -> None:
    w = long_workload
    keys = long_keys(w)
    _, docs = the_end(w)
    result = compare(w.truth, docs.values())
    assert result.ok, (result.field_errors, result.examples)
    for key in keys:
        t = w.truth[key]
        assert (t["state"], t["result"], t["exit_code"], t["usage_source"]) == (
            "running", None, None, None)
        assert t["cpu_eff_pct"] is None and t["mem_max_pct"] is None
        assert t["usage_nodes"] == t["nnodes"] == len(t["nodelist"])
    # the truth is checked: a long job's document that ended, or lost its node samples
    key = sorted(keys)[0]
    for change, wrong in (({"state": "done"}, "state"), ({"usage_nodes": None}, "usage_nodes"),
                          ({"usage_source": "node"}, "usage_source")):
        changed = [{**d, **change} if k == key else d for k, d in docs.items()]
        assert compare(w.truth, changed).field_errors == Counter({wrong: 1})


def test_the_long_jobs_change_no_other_record() -> None:
    spec = dict(seed=6, jobs=120, start=START, time_scale=DEMO_SCALE)
    with_long = Workload(WorkloadSpec(**spec, long_jobs=LONG))  # type: ignore[arg-type]
    plain = Workload(WorkloadSpec(**spec))  # type: ignore[arg-type]
    keys = long_keys(with_long)
    assert [r for r in with_long.records() if r.key not in keys] == list(plain.records())
    assert {k: t for k, t in with_long.truth.items() if k not in keys} == plain.truth
    # nor any other job's id (Slurm: just below those of jobs submitted from the start on;
    # Flux: their own generator bits)
    assert not keys & set(plain.truth)
    lowest = 1000 + int((START - ID_EPOCH) * SLURM_IDS_PER_S)
    assert min(int(k.split(":")[1]) for k, t in plain.truth.items()
               if t["scheduler"] == "slurm") >= lowest
    assert sorted(int(k.split(":")[1]) for k in keys if with_long.truth[k]["scheduler"]
                  == "slurm") == list(range(lowest - 3, lowest))


def test_each_long_job_records_ids_are_those_its_parser_gives(
        long_workload: Workload) -> None:
    keys = long_keys(long_workload)
    records = [r for r in long_workload.records() if r.key in keys]
    assert {r.format for r in records} == {"flux-journal", "slurm-squeue", "node-usage"}
    for rec in records:
        assert set(long_workload.event_ids([rec])) == {
            ev.event_id for ev in normalize(raw_record(rec))}, (rec.format, rec.key)


def test_the_demo_has_them_and_at_its_end_the_gpus_idled_15_real_minutes() -> None:
    # the demo's workload starts now (its records' clock is the wall clock, sped up by
    # --speed from its first record, which is due at the start), so the wall clock at its
    # end is past the start: idle since an hour before it is more than 15 minutes ago
    opts = DemoOptions()
    assert opts.long_jobs == LONG and opts.time_scale == DEMO_SCALE
    before = time.time()
    w = Workload(opts.spec())
    start = w.spec.start
    assert before - 1 <= start <= time.time()
    records = list(w.records())
    assert records[0].time == start
    now, docs = the_end(w)
    idle = [d for d in docs.values() if gpu_panel(d, now)]
    assert len(idle) == 2
    assert all(d["usage_gpu_idle_since"] < (start - 15 * 60) * 1000 for d in idle)
    assert {d["state"] for d in docs.values()} == {"done", "running"}
    assert sum(d["state"] == "running" for d in docs.values()) == LONG


def test_the_checked_workload_fills_the_gpu_idle_panel_too() -> None:
    # the workload `dashboards check` is tested with (tests/integration/
    # test_dashboards_check.py: 540 jobs over the last 30 minutes and the long jobs, folded
    # up to now): the GPU-idle panel has the two long jobs with idle GPUs (no other job
    # has had them idle for 15 minutes), the CPU and memory panels theirs among others
    now = 1_795_000_000.0
    w = Workload(WorkloadSpec(seed=11, jobs=540, rate=0.3, start=now - 1800, long_jobs=LONG))
    keys = long_keys(w)
    events = [ev for r in w.records() if r.time <= now for ev in normalize(raw_record(r))]
    docs = {doc_id(d): d for d in fold(events)}
    profile = {k: w.truth[k]["long_job_profile"] for k in keys}
    assert {k for k in keys if gpu_panel(docs[k], now)} == {
        k for k, p in profile.items() if p == "gpu_idle"}
    assert {k for k in keys if cpu_panel(docs[k])} == {
        k for k, p in profile.items() if p == "idle"}
    assert {k for k in keys if memory_panel(docs[k])} == {
        k for k, p in profile.items() if p == "memory"}
