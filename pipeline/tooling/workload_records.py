"""The shapes of the raw records the synthetic workload writes (pure builders).

Slurm's ``{set, infinite, number}`` integers and TRES lists, sacct steps, a pending (or
running) ``squeue --json`` job, a Flux job's pending journal events, hook environments and node
lists, and the node edge's ``node-usage`` samples of a job on one node over its run: what
:class:`pipeline.tooling.workload.Workload` fills with the jobs it draws. Apart from it so
the workload reads as the jobs' story and these as the sources' formats.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pipeline.core.fluid import f58_encode

__all__ = [
    "GPU_IDLE_PCT",
    "GeneratedRecord",
    "NodeJob",
    "SqueueArray",
    "UsageLevels",
    "env_bytes",
    "flux_jobspec",
    "flux_journal_response",
    "flux_pending",
    "flux_r",
    "hostlist_text",
    "iso_time",
    "node_usage_series",
    "slurm_job_env",
    "slurm_number",
    "pick_weighted",
    "sacct_step",
    "squeue_pending",
    "squeue_running",
    "tres_entry",
]


@dataclass(frozen=True, slots=True)
class GeneratedRecord:
    """One raw record, due at ``time`` (epoch seconds)."""

    time: float
    cluster: str
    scheduler: str
    format: str
    key: str
    payload: bytes


def slurm_number(value: int | None) -> dict[str, Any]:
    """Slurm's ``{set, infinite, number}`` integer (unset for None)."""
    return {"set": value is not None, "infinite": False, "number": value or 0}


def tres_entry(kind: str, count: int, tres_id: int) -> dict[str, Any]:
    return {"type": kind, "name": "", "id": tres_id, "count": count}


def sacct_step(step_id: str, name: str, elapsed: int, cpu_us: int, rss_bytes: int,
                gpu_util: int | None) -> dict[str, Any]:
    """One step of a sacct record: its CPU time (90 % user, 10 % system), its MaxRSS and,
    where accounted, its mean GPU utilisation."""
    user_us = cpu_us * 9 // 10
    system_us = cpu_us - user_us
    average = [{"type": "gres", "name": "gpuutil", "id": 1002, "count": gpu_util}] \
        if gpu_util is not None else []
    return {
        "time": {"elapsed": elapsed,
                 "user": {"seconds": user_us // 10**6, "microseconds": user_us % 10**6},
                 "system": {"seconds": system_us // 10**6,
                            "microseconds": system_us % 10**6}},
        "step": {"id": step_id, "name": name}, "state": ["COMPLETED"],
        "tres": {"requested": {"max": [tres_entry("mem", rss_bytes, 2)], "min": [],
                               "average": average, "total": []}},
    }


def pick_weighted(rng: random.Random, weights: dict[str, int]) -> str:
    return rng.choices(list(weights), weights=list(weights.values()))[0]


def flux_pending(t0: float, ta: float, uid: int, jobid: int, cancelled: bool, how: str
                  ) -> tuple[list[tuple[float, str, dict[str, Any] | None]], str]:
    """The RFC 21 events of a Flux job's wait from ``t0`` until ``ta`` (its alloc, or its
    cancel), and the reason it waits for at ``ta``. A held or dependent job is released
    half-way, unless it is cancelled: then it waits held, or for its dependency, to the end.
    """
    submit = {"userid": uid, "urgency": 0 if how == "held" else 16, "flags": 0, "version": 1}
    events: list[tuple[float, str, dict[str, Any] | None]] = [(t0, "submit", submit)]
    release = t0 + (ta - t0) / 2
    if how == "dependency":
        # on a job submitted just before (the id is only a description to the fold)
        dep = {"description": f"after-success={f58_encode(jobid - (1 << 22))}"}
        events += [(t0 + 0.005, "dependency-add", dep), (t0 + 0.01, "validate", None)]
        if cancelled:
            return events, "dependency"
        events += [(release, "dependency-remove", dep), (release + 0.01, "depend", None),
                   (release + 0.02, "priority", {"priority": 16})]
        return events, "resources"
    events += [(t0 + 0.01, "validate", None), (t0 + 0.02, "depend", None)]
    if how == "held":
        events.append((t0 + 0.03, "priority", {"priority": 0}))
        if cancelled:
            return events, "held"
        events += [(release, "urgency", {"userid": uid, "urgency": 16}),
                   (release + 0.01, "priority", {"priority": 16})]
        return events, "resources"
    events.append((t0 + 0.03, "priority", {"priority": 16}))
    return events, "resources"


def flux_jobspec(name: str, user: str, queue: str, bank: str, nodes: int, per_node_cores: int,
                 per_node_gpus: int, duration: float) -> dict[str, Any]:
    """A Flux job's jobspec (RFC 25, version 1): ``nodes`` nodes of one task slot each."""
    slot_with: list[dict[str, Any]] = [{"type": "core", "count": per_node_cores}]
    if per_node_gpus:
        slot_with.append({"type": "gpu", "count": per_node_gpus})
    return {
        "resources": [{"type": "node", "count": nodes, "with": [
            {"type": "slot", "count": 1, "label": "task", "with": slot_with}]}],
        "tasks": [{"command": [name], "slot": "task", "count": {"per_slot": 1}}],
        "attributes": {"system": {"duration": duration, "cwd": f"/home/{user}/{name}",
                                  "job": {"name": name}, "queue": queue, "bank": bank}},
        "version": 1,
    }


def flux_r(hosts: list[str], first_rank: int, per_node_cores: int, per_node_gpus: int,
           starttime: float, duration: float, *, first_core: int = 0) -> dict[str, Any]:
    """The R (RFC 20, version 1) of a job on ``hosts``, ranks from ``first_rank`` on, cores
    from ``first_core`` on on each (a job sharing its nodes: an array's task)."""
    last_core = first_core + per_node_cores - 1
    children: dict[str, str] = {"core": f"{first_core}-{last_core}"
                                if per_node_cores > 1 else str(first_core)}
    if per_node_gpus:
        children["gpu"] = "0" if per_node_gpus == 1 else f"0-{per_node_gpus - 1}"
    nodes = len(hosts)
    ranks = f"{first_rank}-{first_rank + nodes - 1}" if nodes > 1 else str(first_rank)
    return {"version": 1, "execution": {
        "R_lite": [{"rank": ranks, "children": children}], "starttime": starttime,
        "expiration": starttime + duration, "nodelist": [hostlist_text(hosts)]}}


def flux_journal_response(jobid: int, at: float, name: str, context: dict[str, Any] | None,
                          jobspec: dict[str, Any] | None, r_v1: dict[str, Any] | None
                          ) -> bytes:
    """One job-manager journal response holding one event of ``jobid`` at ``at``: the
    jobspec rides on ``submit``, R on ``alloc`` (as ``job-manager.events-journal`` sends
    them with ``full: true``)."""
    ev: dict[str, Any] = {"timestamp": at, "name": name}
    if context is not None:
        ev["context"] = context
    response: dict[str, Any] = {"id": jobid, "events": [ev]}
    if name == "submit" and jobspec is not None:
        response["jobspec"] = jobspec
    if name == "alloc" and r_v1 is not None:
        response["R"] = r_v1
    return json.dumps(response, separators=(",", ":")).encode()


def iso_time(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def env_bytes(env: dict[str, str]) -> bytes:
    return "".join(f"{k}={v}\n" for k, v in sorted(env.items())).encode()


def slurm_job_env(cluster: str, jobid: int, bank: str, user: str, uid: int, name: str,
                  partition: str, hosts: list[str]) -> dict[str, str]:
    """The ``SLURM_*`` variables every PrologSlurmctld/EpilogSlurmctld run of a job sees
    (the script's context, times and exit codes are the caller's to add)."""
    return {"SLURM_CLUSTER_NAME": cluster, "SLURM_JOB_ID": str(jobid),
            "SLURM_JOB_ACCOUNT": bank, "SLURM_JOB_USER": user,
            "SLURM_JOB_UID": str(uid), "SLURM_JOB_GID": str(uid),
            "SLURM_JOB_GROUP": user, "SLURM_JOB_NAME": name,
            "SLURM_JOB_PARTITION": partition, "SLURM_JOB_NODELIST": hostlist_text(hosts),
            "SLURM_JOB_NUM_NODES": str(len(hosts)), "SLURM_JOB_RESTART_COUNT": "0"}


def hostlist_text(hosts: list[str]) -> str:
    """A compact Slurm/RFC 29 host list of consecutive ``<prefix><NNN>`` names."""
    if len(hosts) == 1:
        return hosts[0]
    prefix = hosts[0][:-3]
    return f"{prefix}[{hosts[0][-3:]}-{hosts[-1][-3:]}]"


@dataclass(frozen=True, slots=True)
class SqueueArray:
    """What ``squeue --json`` says of a job array in one job's record (v0.0.38, as the
    real 22.05 records of tests/data/slurm/real-22.05): the array's id, and either the task
    (a task split off, with a raw job id of its own; the last task keeps the array's id)
    or, for the meta record of the tasks not yet split off, their index set."""

    job_id: int
    #: None in the meta record (squeue prints null there)
    task_id: int | None = None
    #: the pending tasks, ``"1-10000"``, in the meta record only
    task_string: str = ""

    def fields(self) -> dict[str, Any]:
        return {"array_job_id": self.job_id, "array_task_id": self.task_id,
                "array_task_string": self.task_string}


def squeue_pending(cluster: str, jobid: int, name: str, user: str, uid: int, bank: str,
                    partition: str, qos: str, t_submit: int, limit_min: int, nodes: int,
                    cores: int, tres_req: str, reason: str, *,
                    array: SqueueArray | None = None) -> bytes:
    """A ``squeue --json`` (data_parser v0.0.38, Slurm 22.05) document with one pending job
    waiting for ``reason`` (``array``: an array's record, e.g. its pending meta record)."""
    job = _squeue_job(cluster, jobid, name, user, uid, bank, partition, qos, t_submit,
                      limit_min, nodes, cores, tres_req)
    job.update(job_state="PENDING", state_reason=reason)
    if array is not None:
        job.update(array.fields())
    return _squeue_doc(job)


def squeue_running(cluster: str, jobid: int, name: str, user: str, uid: int, bank: str,
                    partition: str, qos: str, t_submit: int, t_start: int, limit_min: int,
                    hosts: list[str], cores: int, gpus: int, tres_req: str, *,
                    array: SqueueArray | None = None) -> bytes:
    """The same document with one job running on ``hosts`` since ``t_start``: what the
    poller's first poll shows of a job that started before it (its end time is the one its
    limit sets, as squeue states it while the job runs); ``array``: an array task."""
    job = _squeue_job(cluster, jobid, name, user, uid, bank, partition, qos, t_submit,
                      limit_min, len(hosts), cores, tres_req)
    if array is not None:
        job.update(array.fields())
    job.update(job_state="RUNNING", state_reason="None", nodes=hostlist_text(hosts),
               start_time=t_start, end_time=t_start + limit_min * 60,
               tres_alloc_str=f"cpu={cores},node={len(hosts)},billing={cores}"
               + (f",gres/gpu={gpus}" if gpus else ""))
    return _squeue_doc(job)


def _squeue_job(cluster: str, jobid: int, name: str, user: str, uid: int, bank: str,
                partition: str, qos: str, t_submit: int, limit_min: int, nodes: int,
                cores: int, tres_req: str) -> dict[str, Any]:
    return {
        "account": bank, "array_job_id": 0, "array_task_id": None, "array_task_string": "",
        "cluster": cluster, "cpus": cores, "eligible_time": t_submit, "end_time": 0,
        "exit_code": 0, "group_id": uid, "group_name": user, "job_id": jobid,
        "job_state": "PENDING", "name": name, "nodes": "", "node_count": nodes,
        "partition": partition, "qos": qos, "restart_cnt": 0, "start_time": 0,
        "state_reason": "None", "submit_time": t_submit, "time_limit": limit_min,
        "tres_req_str": tres_req, "user_id": uid, "user_name": user, "het_job_id": 0,
        "het_job_offset": 0, "current_working_directory": f"/home/{user}/{name}",
    }


def _squeue_doc(job: dict[str, Any]) -> bytes:
    doc = {"meta": {"plugin": {"type": "openapi/v0.0.38", "name": "Slurm OpenAPI v0.0.38"},
                    "Slurm": {"version": {"major": 22, "micro": 8, "minor": 5},
                              "release": "22.05.8"}},
           "errors": [], "jobs": [job]}
    return json.dumps(doc, separators=(",", ":")).encode()


#: A GPU under this utilization (percent) is idle: the edge's ``gpu_idle_since``
GPU_IDLE_PCT = 5.0
#: Memory of one GPU (an 80 GiB card)
GPU_MEM_TOTAL_BYTES = 80 * 2**30


@dataclass(frozen=True, slots=True)
class NodeJob:
    """What the node edge of one node knows of a running job: the fixed parts of its
    samples there (usage_contract: the ``node-usage`` payload)."""

    scheduler: str
    #: the id as the node sees it (Flux: F58, as flux-shell sets FLUX_JOB_ID)
    job_id: str
    node: str
    reader: str
    #: the edge process's run id on this node
    run: str
    #: the identity of the job's CPU counter on this node
    epoch: str
    #: the job's cores and GPUs on this node
    cores: int
    gpus: int
    #: the job's memory limit on the node (its cgroup's); None where the reader knows none
    mem_limit_bytes: int | None
    #: what the memory level is a share of: the job's allocation per node
    mem_base_bytes: int
    #: the GPUs' uuids prefix (one card per index)
    gpu_uuid: str = "GPU-0"


@dataclass(frozen=True, slots=True)
class UsageLevels:
    """A job's usage profile on its nodes: the levels the samples scatter around."""

    #: share of the cores busy (0..1)
    cpu: float
    #: peak memory as a share of the allocation per node (0..1)
    mem: float
    #: mean utilization of its GPUs, percent
    gpu: float


def _sample_times(rng: random.Random, begin: float, end: float, interval: float, *,
                  since: float | None = None, final: bool = True
                  ) -> tuple[float, float | None, list[float]]:
    """When the edge samples a job running from ``begin`` to ``end``: at its own ticks,
    ``interval`` apart from a phase the job does not choose, then once at the end (the
    final record) unless the job is still running there (``final=False``). Milliseconds,
    as an edge's clock is read. Returns the first tick, the last tick before ``since``
    (None: none; the ticks before it are not listed) and the ticks listed."""
    times: list[float] = []
    t = first = begin + rng.uniform(0.0, interval)
    before = None
    if since is not None and t < since:
        # jumped to, not stepped through: a job that ran hours before the records at a
        # scaled interval has hundreds of thousands of ticks there
        t += max(math.ceil((since - t) / interval) - 1, 0) * interval
        while t < since:
            t += interval
        before = round(t - interval, 3)
    while round(t, 3) < round(end, 3):
        times.append(round(t, 3))
        t += interval
    if final:
        times.append(round(end, 3))
    return round(first, 3), before, times


def node_usage_series(rng: random.Random, job: NodeJob, levels: UsageLevels, begin: float,
                      end: float, interval: float, *, since: float | None = None,
                      final: bool = True) -> list[dict[str, Any]]:
    """The payloads (decoded) the node edge sends for ``job`` on its node while it runs
    from ``begin`` (its tasks start) to ``end`` (its tasks end): cumulative counters
    (CPU, the kernel's or the edge's memory peak, GPU-busy and GPU seconds) that never go
    back, what it holds now scattered around ``levels``, the last one ``final``. Memory
    grows to its peak over the first half of the run. Counters are rounded to
    milliseconds as sent, and each interval's figures are differences of the rounded
    counters, so the payloads agree with themselves exactly.

    A job that ran before the records begin and runs on after them (the workload's long
    jobs): ``since`` leaves out the samples before it (the edge took them, from the job's
    start on, but they are not among the records) and ``final=False`` sends no final
    sample, the job still running at ``end``. The counters then start from what the
    samples left out would have summed at the levels themselves (CPU from the start,
    GPU time from the edge's first tick, the memory trend's peak), the first interval
    is the one since the last tick left out, and GPUs whose level keeps every reading
    under the idle line have been idle since the first tick."""
    out: list[dict[str, Any]] = []
    cpu = 0.0  # the job's CPU seconds on the node, unrounded
    peak = 0
    busy_s = gpu_s = 0.0
    idle_since: float | None = None
    run = max(end - begin, 1e-3)
    cgroup = job.reader != "procs"
    first, prev_t, times = _sample_times(rng, begin, end, interval, since=since, final=final)
    # the edge's previous sample of the job (sent or not): its time and CPU counter
    prev_cpu_s = 0.0
    if prev_t is not None:
        cpu = min(1.0, levels.cpu) * job.cores * (prev_t - begin)
        prev_cpu_s = round(cpu, 3)
        trend = levels.mem * job.mem_base_bytes * min(1.0, 0.5 + (prev_t - begin) / run)
        peak = int(trend) if cgroup else int(trend * 0.96)
        busy_s = min(100.0, levels.gpu) / 100 * job.gpus * (prev_t - first)
        gpu_s = float(job.gpus * (prev_t - first))
        if job.gpus and round(min(100.0, levels.gpu * 1.2), 1) < GPU_IDLE_PCT:
            idle_since = first
    for i, t in enumerate(times):
        dt = None if prev_t is None else round(t - prev_t, 3)
        rate = min(1.0, max(0.0, levels.cpu * rng.uniform(0.95, 1.05)))
        # a first tick read to the millisecond can fall just before the tasks' start:
        # no CPU then (a counter is never negative)
        cpu += rate * job.cores * max(0.0, t - (begin if prev_t is None else prev_t))
        cpu_s = round(cpu, 3)
        trend = levels.mem * job.mem_base_bytes * min(1.0, 0.5 + (t - begin) / run)
        mem = int(trend * rng.uniform(0.96, 1.0))
        # the kernel saw the trend between readings; the edge only its own readings
        peak = max(peak, int(trend) if cgroup else mem)
        utils = [round(min(100.0, levels.gpu * rng.uniform(0.8, 1.2)), 1)
                 for _ in range(job.gpus)]
        if dt:
            busy_s += sum(utils) / 100 * dt
            gpu_s += job.gpus * dt
        idle = bool(utils) and all(u < GPU_IDLE_PCT for u in utils)
        idle_since = (idle_since if idle_since is not None else t) if idle else None
        user_s = round(cpu_s * 0.9, 3)
        rss = int(mem * 0.9) if cgroup else mem
        last = final and i == len(times) - 1
        out.append({
            "v": 1, "scheduler": job.scheduler, "job_id": job.job_id, "node": job.node,
            "reader": job.reader, "sampled_at": t, "epoch": job.epoch, "run": job.run,
            "cpu_s": cpu_s, "cpu_user_s": user_s, "cpu_system_s": round(cpu_s - user_s, 3),
            "interval_s": dt,
            "cpu_interval_s": None if prev_t is None else round(cpu_s - prev_cpu_s, 3),
            "mem_bytes": mem, "mem_peak_bytes": peak, "mem_rss_bytes": rss,
            "mem_file_bytes": mem - rss if cgroup else None,
            "mem_limit_bytes": job.mem_limit_bytes, "processes": 2,
            "gpus": [{"index": g, "uuid": f"{job.gpu_uuid}-{g}", "util_pct": u,
                      "mem_bytes": int(GPU_MEM_TOTAL_BYTES * (0.05 + 0.8 * u / 100)),
                      "mem_total_bytes": GPU_MEM_TOTAL_BYTES}
                     for g, u in enumerate(utils)],
            "gpu_busy_s": round(busy_s, 3), "gpu_s": round(gpu_s, 3),
            "gpu_idle_since": idle_since, "final": last,
            "reason": ("cgroup removed" if cgroup else "no process left") if last else None,
        })
        prev_t, prev_cpu_s = t, cpu_s
    return out
