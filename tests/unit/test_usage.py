"""Usage at the end of a job (issue 13): CPU time and efficiency, peak memory, GPU
utilisation from sacct's steps, on the real Slurm records, and how the fold keeps them.

Expected values are worked out by hand from the files: each test names the numbers it
read there.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from datafiles import vector

from pipeline.core.model import JobEvent, make_event_id
from pipeline.fold import fold
from pipeline.parsers import parse_record

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"
USAGE = ("cpu_time_s", "cpu_eff_pct", "mem_max_mb", "mem_max_pct", "gpu_util_pct")


def docs_of(payload: bytes, fmt: str = "slurm-sacct") -> dict[str, dict[str, Any]]:
    events = parse_record(fmt, payload, cluster="c", received_at=0.0)
    return {d["job_id"]: d for d in fold(events)}


def usage(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: doc[k] for k in USAGE}


@pytest.fixture(scope="module")
def sacct_25_11() -> dict[str, Any]:
    return json.loads(vector("slurm", "sacct_25.11.json").read_bytes())


@pytest.fixture(scope="module")
def docs_25_11(sacct_25_11: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return docs_of(json.dumps(sacct_25_11).encode())


# -- the real Slurm 25.11.7 sacct (v0.0.44, jobacct_gather/linux) ------------------------


def test_sleeping_job_uses_almost_no_cpu(docs_25_11: dict[str, dict[str, Any]]) -> None:
    # job 1 "ok" (sleep 2): step 1.batch user 1097 us + system 1596 us; elapsed 3 s, 1 CPU;
    # its 3 s step had no jobacct sample (30 s period), so no MaxRSS
    doc = docs_25_11["1"]
    assert doc["cpu_time_s"] == pytest.approx(0.002693)
    assert doc["cpu_eff_pct"] == pytest.approx(100 * 0.002693 / 3)
    assert (doc["mem_max_mb"], doc["mem_max_pct"], doc["gpu_util_pct"]) == (None, None, None)


def test_efficiency_counts_every_allocated_cpu(docs_25_11: dict[str, dict[str, Any]]) -> None:
    # job 6 "multi" (-c 2): user 1537 us + system 1926 us, elapsed 4 s on 2 CPUs
    doc = docs_25_11["6"]
    assert doc["ncores"] == 2
    assert doc["cpu_time_s"] == pytest.approx(0.003463)
    assert doc["cpu_eff_pct"] == pytest.approx(100 * 0.003463 / (4 * 2))


def test_peak_memory_of_a_job_long_enough_to_be_sampled(
        docs_25_11: dict[str, dict[str, Any]]) -> None:
    # job 12 "tlimit" (TIMEOUT after 65 s): tres.requested.max mem 3047424 bytes; the
    # cluster allocates no memory (CR_Core: tres.allocated has no mem, required
    # memory_per_node 0), so there is no percentage
    doc = docs_25_11["12"]
    assert doc["result"] == "timeout"
    assert doc["mem_max_mb"] == 3047424 / 2**20 == pytest.approx(2.90625)
    assert doc["mem_max_pct"] is None and doc["mem_alloc_mb"] is None
    assert doc["mem_req_mb"] == 4000  # tres.requested mem
    assert doc["cpu_time_s"] == pytest.approx(0.002204)
    assert doc["cpu_eff_pct"] == pytest.approx(100 * 0.002204 / 65)


def test_cpu_time_is_the_steps_sum_never_added_to_the_jobs_own(
        sacct_25_11: dict[str, Any], docs_25_11: dict[str, dict[str, Any]]) -> None:
    """25.11 fills the job's time.total with the steps' sum: adding both would double it."""
    for job in sacct_25_11["jobs"]:
        steps = sum(s["time"]["total"]["microseconds"] for s in job["steps"])
        assert job["time"]["total"]["microseconds"] == steps  # what the vector shows
        doc = docs_25_11[str(job["job_id"])]
        if job["steps"]:
            assert doc["cpu_time_s"] == pytest.approx(steps / 1e6), job["name"]


def test_a_job_that_never_ran_or_ran_0_s_has_no_efficiency(
        docs_25_11: dict[str, dict[str, Any]]) -> None:
    # job 4 "held": cancelled while held, no steps; job 15 "down-exit2": elapsed 0
    assert usage(docs_25_11["4"]) == dict.fromkeys(USAGE)
    assert docs_25_11["15"]["cpu_time_s"] == pytest.approx(0.001567)
    assert docs_25_11["15"]["cpu_eff_pct"] is None


def test_no_source_but_sacct_states_usage() -> None:
    """jobcomp (real 25.11 kafka records) and squeue carry none; Flux's journal neither."""
    for fmt, path in (("slurm-jobcomp", vector("slurm", "jobcomp_kafka_25.11.jsonl")),
                      ("slurm-squeue", vector("slurm", "squeue_25.11.json"))):
        for line in (path.read_bytes().splitlines() if fmt == "slurm-jobcomp"
                     else [path.read_bytes()]):
            for d in docs_of(line, fmt).values():
                assert usage(d) == dict.fromkeys(USAGE), (fmt, d["job_id"])
    journal = vector("flux", "real-0.88-journal-backlog.jsonl").read_bytes()
    events = [e for line in journal.splitlines() if line.strip()
              for e in parse_record("flux-journal", line, cluster="c", received_at=0.0)]
    assert {tuple(usage(d).values()) for d in fold(events)} == {(None,) * len(USAGE)}


# -- the real Slurm 22.05.8 sacct (dbv0.0.38) and the derived older-version fixtures ------


def test_22_05_steps_give_the_figures_its_job_record_leaves_at_0() -> None:
    """22.05 leaves the job's own user/system at 0; the steps hold the real figures."""
    docs = docs_of((DATA / "real-22.05" / "sacct.json").read_bytes())
    # 75 timeout-job: batch step user 1073 us, system 0; elapsed 87 s; MaxRSS 3321856 B
    assert docs["75"]["cpu_time_s"] == pytest.approx(0.001073)
    assert docs["75"]["cpu_eff_pct"] == pytest.approx(100 * 0.001073 / 87)
    assert docs["75"]["mem_max_mb"] == pytest.approx(3321856 / 2**20)
    assert docs["75"]["mem_max_pct"] is None  # required.memory 0, no mem allocated
    # 77 fail-job: user 822 us + system 1005 us, elapsed 1 s
    assert docs["77"]["cpu_time_s"] == pytest.approx(0.001827)
    assert docs["77"]["cpu_eff_pct"] == pytest.approx(0.1827)
    # 79 cancelled while held: no steps
    assert usage(docs["79"]) == dict.fromkeys(USAGE)


@pytest.mark.parametrize("name", ["sacct_v0.0.38_22.05.json", "sacct_v0.0.39_23.02.json",
                                  "sacct_v0.0.42_24.11.json"])
def test_derived_fixtures_state_no_usage(name: str) -> None:
    """These fixtures were derived without step statistics (their steps have no user or
    system time and no usage TRES), so nothing is measured: null, not 0 %."""
    for doc in docs_of((DATA / name).read_bytes()).values():
        assert usage(doc) == dict.fromkeys(USAGE), doc["job_id"]
    # what was asked and given is there all the same: mem=500 in the TRES lists
    doc = docs_of((DATA / name).read_bytes())["2"]
    assert (doc["mem_req_mb"], doc["mem_alloc_mb"]) == (500, 500)


# -- the memory and GPU rules, on the real 25.11 "tlimit" record with one thing changed ----


def _tlimit(sacct: dict[str, Any]) -> dict[str, Any]:
    [job] = [j for j in sacct["jobs"] if j["name"] == "tlimit"]
    return copy.deepcopy(job)


def _doc_of(job: dict[str, Any], sacct: dict[str, Any]) -> dict[str, Any]:
    return docs_of(json.dumps({**sacct, "jobs": [job]}).encode())[str(job["job_id"])]


def _alloc(job: dict[str, Any], kind: str, count: int, name: str = "") -> None:
    job["tres"]["allocated"] = [t for t in job["tres"]["allocated"]
                                if (t["type"], t["name"]) != (kind, name)]
    job["tres"]["allocated"].append({"type": kind, "name": name, "id": 0, "count": count})


MAXRSS_MB = 3047424 / 2**20


def test_memory_percentage_is_per_allocated_node(sacct_25_11: dict[str, Any]) -> None:
    job = _tlimit(sacct_25_11)
    _alloc(job, "mem", 8)
    assert _doc_of(job, sacct_25_11)["mem_max_pct"] == pytest.approx(100 * MAXRSS_MB / 8)
    assert _doc_of(job, sacct_25_11)["mem_alloc_mb"] == 8
    _alloc(job, "node", 2)  # 8 MiB over 2 nodes: 4 per node, MaxRSS is per node
    assert _doc_of(job, sacct_25_11)["mem_max_pct"] == pytest.approx(100 * MAXRSS_MB / 4)


def test_memory_asked_for_counts_where_none_is_allocated(sacct_25_11: dict[str, Any]) -> None:
    job = _tlimit(sacct_25_11)
    job["required"]["memory_per_node"] = {"set": True, "infinite": False, "number": 16}
    assert _doc_of(job, sacct_25_11)["mem_max_pct"] == pytest.approx(100 * MAXRSS_MB / 16)
    job["required"]["memory_per_node"] = {"set": False, "infinite": False, "number": 0}
    job["required"]["memory_per_cpu"] = {"set": True, "infinite": False, "number": 6}
    assert _doc_of(job, sacct_25_11)["mem_max_pct"] == pytest.approx(100 * MAXRSS_MB / 6)
    # v0.0.38/39: one integer, per CPU when its top bit (MEM_PER_CPU) is set
    del job["required"]["memory_per_cpu"], job["required"]["memory_per_node"]
    job["required"]["memory"] = (1 << 63) | 5
    assert _doc_of(job, sacct_25_11)["mem_max_pct"] == pytest.approx(100 * MAXRSS_MB / 5)
    job["required"]["memory"] = 10
    assert _doc_of(job, sacct_25_11)["mem_max_pct"] == pytest.approx(100 * MAXRSS_MB / 10)


def test_largest_step_maxrss_and_all_steps_cpu(sacct_25_11: dict[str, Any]) -> None:
    job = _tlimit(sacct_25_11)
    step = copy.deepcopy(job["steps"][0])
    step["step"] = {"id": "12.0", "name": "sh"}
    step["time"]["user"] = {"seconds": 30, "microseconds": 0}
    step["time"]["system"] = {"seconds": 1, "microseconds": 500000}
    for t in step["tres"]["requested"]["max"]:
        if t["type"] == "mem":
            t["count"] = 100 * 2**20
    job["steps"].append(step)
    doc = _doc_of(job, sacct_25_11)
    assert doc["mem_max_mb"] == 100.0
    assert doc["cpu_time_s"] == pytest.approx(0.002204 + 31.5)
    assert doc["cpu_eff_pct"] == pytest.approx(100 * (0.002204 + 31.5) / 65)


def test_gpu_utilisation_where_the_site_accounts_it(sacct_25_11: dict[str, Any]) -> None:
    job = _tlimit(sacct_25_11)
    assert _doc_of(job, sacct_25_11)["gpu_util_pct"] is None
    first = job["steps"][0]
    second = copy.deepcopy(first)
    second["step"] = {"id": "12.0", "name": "train"}
    first["time"]["elapsed"], second["time"]["elapsed"] = 10, 30
    for step, util in ((first, 20), (second, 80)):
        step["tres"]["requested"]["average"].append(
            {"type": "gres", "name": "gpuutil", "id": 1003, "count": util})
    job["steps"].append(second)
    # the mean over the steps' time: (20 x 10 + 80 x 30) / 40
    assert _doc_of(job, sacct_25_11)["gpu_util_pct"] == pytest.approx(65.0)


def test_malformed_statistics_are_left_out_not_the_job(sacct_25_11: dict[str, Any]) -> None:
    job = _tlimit(sacct_25_11)
    job["steps"][0]["time"]["user"] = "lots"
    job["steps"][0]["tres"]["requested"]["max"] = "garbage"
    doc = _doc_of(job, sacct_25_11)
    assert doc["result"] == "timeout"
    assert (doc["cpu_time_s"], doc["mem_max_mb"]) == (None, None)


# -- the fold: usage belongs to the run and arrives after the end --------------------------

T0 = 1_795_000_000.0
IDENT = {"user": "alice", "job_name": "j"}


def sev(name: str, t: float, facts: dict[str, Any], source: str) -> JobEvent:
    return JobEvent(cluster="c", scheduler="slurm", job_id="5", event=name, timestamp=t,
                    source=f"slurm-{source}",
                    event_id=make_event_id("c", "slurm", "5", name, t, source),
                    facts=facts)


RUN = {**IDENT, "t_submit": T0, "t_start": T0 + 10, "nnodes": 1, "ncores": 2,
       "nodelist": ["n1"]}
JOBCOMP_END = sev("end", T0 + 110, {**RUN, "t_end": T0 + 110, "result": "completed"},
                  "jobcomp")
SACCT_END = sev("end", T0 + 110, {**RUN, "t_end": T0 + 110, "result": "completed",
                                  "cpu_time_s": 150.0, "cpu_eff_pct": 75.0,
                                  "mem_max_mb": 300.0, "mem_max_pct": 50.0}, "sacct")


def test_running_job_shows_no_usage_and_the_end_record_alone_neither() -> None:
    running = fold([sev("start", T0 + 10, RUN, "squeue")])[0]
    assert running["state"] == "running" and usage(running) == dict.fromkeys(USAGE)
    done = fold([sev("start", T0 + 10, RUN, "squeue"), JOBCOMP_END])[0]
    assert done["state"] == "done" and usage(done) == dict.fromkeys(USAGE)


@pytest.mark.parametrize("order", [1, -1])
def test_sacct_usage_arrives_after_jobcomp_and_stays(order: int) -> None:
    doc = fold([JOBCOMP_END, SACCT_END][::order])[0]
    assert usage(doc) == {"cpu_time_s": 150.0, "cpu_eff_pct": 75.0, "mem_max_mb": 300.0,
                          "mem_max_pct": 50.0, "gpu_util_pct": None}


def test_a_requeued_job_shows_its_last_runs_usage() -> None:
    s1 = T0 + 200
    run2 = {**IDENT, "t_submit": s1, "t_start": s1 + 10, "nnodes": 1, "ncores": 2,
            "nodelist": ["n2"]}
    first = sev("end", T0 + 110, {**RUN, "t_end": T0 + 110, "result": "node_fail",
                                  "cpu_time_s": 180.0, "cpu_eff_pct": 90.0}, "sacct")
    requeued = sev("requeue", T0 + 110, {**IDENT, "t_submit": T0}, "squeue")
    pending = fold([first, requeued, sev("submit", s1, {**IDENT, "t_submit": s1}, "squeue")])
    assert pending[0]["state"] == "pending" and pending[0]["cpu_time_s"] is None
    second = sev("end", s1 + 30, {**run2, "t_end": s1 + 30, "result": "completed",
                                  "cpu_time_s": 6.0, "cpu_eff_pct": 10.0}, "sacct")
    [doc] = fold([first, requeued, second])
    assert doc["requeue_count"] == 1 and doc["nodelist"] == ["n2"]
    assert (doc["cpu_time_s"], doc["cpu_eff_pct"]) == (6.0, 10.0)


def test_efficiencies_weighted_by_node_hours_for_the_panels() -> None:
    # RUN: 1 node from T0 + 10 to T0 + 110 = 100 s of one node
    doc = fold([SACCT_END])[0]
    assert doc["node_hours"] == pytest.approx(100 / 3600)
    assert doc["cpu_eff_x_nh"] == pytest.approx(75.0 * 100 / 3600)
    assert doc["mem_eff_x_nh"] == pytest.approx(50.0 * 100 / 3600)
    # no usage (jobcomp only): no product, so the weighted mean's sums skip the job
    bare = fold([JOBCOMP_END])[0]
    assert (bare["cpu_eff_x_nh"], bare["mem_eff_x_nh"]) == (None, None)
