"""The jobs of ``squeue --json`` / ``sacct --json`` documents, read into one shape.

:func:`squeue_job` and :func:`sacct_job` read one job of either document, across the
data_parser versions, into a :class:`SlurmJob`; :mod:`pipeline.parsers.slurm_json` makes
its events. Apart from it because the two readers, the fields they share and sacct's usage
are most of the code, and the event rules are read best alone.

Usage (sacct only: squeue and jobcomp carry none, jobcomp's ``cpu_hours`` is only elapsed x
CPUs). The end event of a job that ran states what accounting measured for that run, from
its steps (``steps[]``: the batch, extern and srun steps), as seff does:

* ``cpu_time_s``: the sum over the steps of ``time.user`` + ``time.system`` (seff's
  TotalCPU). Never the job's own ``time.user``/``time.system`` as well: slurmdbd fills
  those with the same sum (25.11) or leaves them 0 (22.05), so adding them would count
  twice and using them alone would lose 22.05's figures. Steps that state no user/system
  time add nothing; when none states any, no fact;
* ``cpu_eff_pct``: 100 x cpu_time_s / (``time.elapsed`` x allocated CPUs), the job's
  own elapsed seconds (whole seconds: a fully busy job can read a little above 100);
  none for an elapsed time of 0;
* ``mem_max_mb``: the largest step MaxRSS, ``tres.requested.max`` ``mem`` (bytes, the
  largest task of the step on its node), in MiB. jobacct_gather samples every
  JobAcctGatherFrequency seconds (30 by default) and the step's last sample is what
  counts, so a step shorter than one period often states none: then no fact;
* ``mem_max_pct``: 100 x mem_max_mb / the memory allocated per node: ``tres.allocated``
  ``mem`` (MiB, the whole job) / allocated nodes; where memory is not a consumable
  resource (SelectTypeParameters without ``_Memory``: nothing allocated) the request,
  ``required.memory_per_node``, else ``memory_per_cpu`` x CPUs per node (v0.0.38/39:
  ``required.memory``, per CPU when its top bit is set); 0 means unknown;
* ``gpu_util_pct``: the mean of the steps' ``tres.requested.average`` ``gres/gpuutil``
  (Slurm's AccountingStorageTRES=gres/gpuutil, sampled through an acct_gather_gpu
  plugin), weighted by step elapsed time; no fact where the site does not account it.

``mem_req_mb`` and ``mem_alloc_mb`` (MiB, whole job) come from ``tres.requested`` /
``tres.allocated`` ``mem``. Usage data that is malformed is left out rather than refused:
it is informative, and refusing it would lose the job's end.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeline.parsers.slurm_common import (
    UINT16,
    UINT32,
    StateInfo,
    classify_state,
    epoch,
    exit_from_object,
    expand_nodes,
    gpu_count,
    has_nodes,
    opt_int,
    opt_str,
    put,
    queue_name,
    scrub_record,
    slurm_int,
    tres_counts,
    tres_list_counts,
)
from pipeline.runtime.errors import ParseError

__all__ = ["SlurmJob", "sacct_job", "squeue_job"]

#: restart_cnt is a uint16 in Slurm; more is garbage.
_MAX_RESTARTS = 0xFFFF


@dataclass(slots=True)
class SlurmJob:
    """One job of a document, normalized; what :mod:`pipeline.parsers.slurm_json` makes
    its events of."""

    job_id: int
    cluster: str | None
    state: StateInfo
    t_submit: float | None
    t_eligible: float | None
    t_start: float | None
    t_end: float | None
    nodelist: list[str]
    identity: dict[str, Any]
    alloc: dict[str, Any]
    exit_pair: tuple[int, int] | None
    restart_count: int | None
    context: dict[str, Any] = field(default_factory=dict)
    record: Mapping[str, Any] | None = None
    #: what accounting measured for the run (sacct's steps), stated with its end
    usage: dict[str, Any] = field(default_factory=dict)



# --------------------------------------------------------------------------- squeue job

def squeue_job(job: Mapping[str, Any], w: str) -> SlurmJob:
    if "job_state" not in job:
        raise ParseError("missing-field", f"{w}job_state is missing")
    state = classify_state(job["job_state"], f"{w}job_state")
    identity: dict[str, Any] = {}
    put(identity, "job_name", opt_str(job, "name", what=w))
    put(identity, "user", opt_str(job, "user_name", what=w))
    put(identity, "uid", opt_int(job, "user_id", what=w))
    put(identity, "group", opt_str(job, "group_name", what=w))
    put(identity, "gid", opt_int(job, "group_id", what=w))
    put(identity, "bank", opt_str(job, "account", what=w))
    put(identity, "queue", queue_name(opt_str(job, "partition", what=w)))
    put(identity, "qos", opt_str(job, "qos", what=w))
    put(identity, "cwd", opt_str(job, "current_working_directory", what=w))
    _put_limit(identity, opt_int(job, "time_limit", what=w))
    _put_array(identity, opt_int(job, "array_job_id", what=w),
               opt_int(job, "array_task_id", what=w))
    _put_het(identity, opt_int(job, "het_job_id", what=w),
             opt_int(job, "het_job_offset", what=w))
    req = tres_counts(job.get("tres_req_str"), f"{w}tres_req_str")
    _put_requests(identity, req)

    nodelist = _squeue_nodelist(job, w)
    alloc_tres = tres_counts(job.get("tres_alloc_str"), f"{w}tres_alloc_str")
    alloc: dict[str, Any] = {}
    put(alloc, "nodelist", nodelist)
    put(alloc, "nnodes", alloc_tres.get("node") or opt_int(job, "node_count", what=w)
        or (len(nodelist) or None))
    put(alloc, "ncores", alloc_tres.get("cpu") or _resources_cpus(job, w)
        or opt_int(job, "cpus", what=w))
    put(alloc, "ngpus", gpu_count(alloc_tres))

    context: dict[str, Any] = {"job_state": job["job_state"]}
    for key in ("state_reason", "array_task_string"):
        if isinstance(job.get(key), str) and job[key]:
            context[key] = job[key]
    return SlurmJob(
        job_id=_job_id(job, w), cluster=opt_str(job, "cluster", what=w), state=state,
        t_submit=epoch(job.get("submit_time"), f"{w}submit_time"),
        t_eligible=epoch(job.get("eligible_time"), f"{w}eligible_time"),
        t_start=epoch(job.get("start_time"), f"{w}start_time"),
        t_end=epoch(job.get("end_time"), f"{w}end_time"),
        nodelist=nodelist, identity=identity, alloc=alloc,
        # squeue's exit code is the raw wait status (or, v0.0.40+, the decoded object):
        # right in every version, unlike sacct's.
        exit_pair=exit_from_object(job.get("exit_code"), f"{w}exit_code"),
        restart_count=_restarts(job, w), context=context,
    )


def _squeue_nodelist(job: Mapping[str, Any], w: str) -> list[str]:
    nodes = opt_str(job, "nodes", what=w)
    if has_nodes(nodes):
        return expand_nodes(nodes, f"{w}nodes")
    res = job.get("job_resources")
    if res is None:
        return []
    if not isinstance(res, dict):
        raise ParseError("bad-type", f"{w}job_resources must be an object")
    inner = res.get("nodes")
    if isinstance(inner, str):  # v0.0.38-40: {"nodes": "vm", "allocated_nodes": [...]}
        return expand_nodes(inner, f"{w}job_resources.nodes")
    if isinstance(inner, dict):  # v0.0.41+ (24.05): {"nodes": {"list", "allocation"}}
        listed = opt_str(inner, "list", what=f"{w}job_resources.nodes.")
        if has_nodes(listed):
            return expand_nodes(listed, f"{w}job_resources.nodes.list")
        return _names(inner.get("allocation"), "name", f"{w}job_resources.nodes.allocation")
    return _names(res.get("allocated_nodes"), "nodename", f"{w}job_resources.allocated_nodes")


def _names(entries: Any, key: str, where: str) -> list[str]:
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise ParseError("bad-type", f"{where} must be an array")
    names = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ParseError("bad-type", f"{where}[{i}] must be an object")
        name = opt_str(entry, key, what=f"{where}[{i}].")
        if name:
            names.append(name)
    return names


def _resources_cpus(job: Mapping[str, Any], w: str) -> int | None:
    res = job.get("job_resources")
    if not isinstance(res, dict):
        return None
    for key in ("cpus", "allocated_cpus"):
        if key in res:
            return opt_int(res, key, what=f"{w}job_resources.")
    return None


# --------------------------------------------------------------------------- sacct job

def sacct_job(job: Mapping[str, Any], w: str, trust_exit: bool) -> SlurmJob:
    state_obj = job.get("state")
    if state_obj is None:
        raise ParseError("missing-field", f"{w}state is missing")
    if not isinstance(state_obj, dict) or "current" not in state_obj:
        raise ParseError("bad-type", f"{w}state must be an object with 'current'")
    state = classify_state(state_obj["current"], f"{w}state.current")
    times = _sub(job, "time", w)
    array = _sub(job, "array", w)
    het = _sub(job, "het", w)
    tres = _sub(job, "tres", w)

    identity: dict[str, Any] = {}
    put(identity, "job_name", opt_str(job, "name", what=w))
    put(identity, "user", opt_str(job, "user", what=w))
    put(identity, "group", opt_str(job, "group", what=w))
    put(identity, "bank", opt_str(job, "account", what=w))
    put(identity, "queue", queue_name(opt_str(job, "partition", what=w)))
    put(identity, "qos", opt_str(job, "qos", what=w))
    put(identity, "cwd", opt_str(job, "working_directory", what=w))
    _put_limit(identity, opt_int(times, "limit", what=f"{w}time."))  # minutes
    _put_array(identity, opt_int(array, "job_id", what=f"{w}array."),
               opt_int(array, "task_id", what=f"{w}array."))
    _put_het(identity, opt_int(het, "job_id", what=f"{w}het."),
             opt_int(het, "job_offset", what=f"{w}het."))
    requested = tres_list_counts(tres.get("requested"), f"{w}tres.requested")
    _put_requests(identity, requested)
    put(identity, "mem_req_mb", requested.get("mem") or None)

    nodes = opt_str(job, "nodes", what=w)  # "None assigned" when it never ran
    nodelist = expand_nodes(nodes, f"{w}nodes")
    alloc_tres = tres_list_counts(tres.get("allocated"), f"{w}tres.allocated")
    alloc: dict[str, Any] = {}
    put(alloc, "nodelist", nodelist)
    put(alloc, "nnodes", alloc_tres.get("node") or opt_int(job, "allocation_nodes", what=w)
        or (len(nodelist) or None))
    put(alloc, "ncores", alloc_tres.get("cpu"))
    put(alloc, "ngpus", gpu_count(alloc_tres))
    put(alloc, "mem_alloc_mb", alloc_tres.get("mem") or None)
    usage = _sacct_usage(job, alloc_tres, opt_int(times, "elapsed", what=f"{w}time."),
                         alloc.get("ncores"), alloc.get("nnodes"))

    context: dict[str, Any] = {"state": state_obj["current"]}
    if isinstance(state_obj.get("reason"), str):
        context["state_reason"] = state_obj["reason"]
    exit_pair = exit_from_object(job.get("exit_code"), f"{w}exit_code")
    if not trust_exit:
        if "exit_code" in job:
            context["exit_code"] = job["exit_code"]
            context["exit_code_untrusted"] = True
        exit_pair = None
    return SlurmJob(
        job_id=_job_id(job, w), cluster=opt_str(job, "cluster", what=w), state=state,
        t_submit=epoch(times.get("submission"), f"{w}time.submission"),
        t_eligible=epoch(times.get("eligible"), f"{w}time.eligible"),
        t_start=epoch(times.get("start"), f"{w}time.start"),
        t_end=epoch(times.get("end"), f"{w}time.end"),
        nodelist=nodelist, identity=identity, alloc=alloc, exit_pair=exit_pair,
        restart_count=_restarts(job, w), context=context, record=scrub_record(job),
        usage=usage,
    )


# --------------------------------------------------------------------------- sacct usage

#: The top bit of v0.0.38/39 ``required.memory``: the figure is per CPU (Slurm MEM_PER_CPU).
_MEM_PER_CPU = 1 << 63


def _sacct_usage(job: Mapping[str, Any], alloc_tres: Mapping[str, int], elapsed: int | None,
                 ncores: int | None, nnodes: int | None) -> dict[str, Any]:
    """The usage facts of a sacct job (see the module docstring)."""
    cpu_s: float | None = None
    mem_bytes: int | None = None
    gpu_sum = gpu_weight = 0.0
    gpu_seen: list[float] = []
    steps = job.get("steps")
    for step in steps if isinstance(steps, list) else ():
        if not isinstance(step, dict):
            continue
        times = step.get("time") if isinstance(step.get("time"), dict) else {}
        user, system = _seconds(times.get("user")), _seconds(times.get("system"))
        if user is not None and system is not None:
            cpu_s = (cpu_s or 0.0) + user + system
        requested = _usage_tres(step, "max")
        mem = requested.get("mem")
        if mem is not None and (mem_bytes is None or mem > mem_bytes):
            mem_bytes = mem
        util = _usage_tres(step, "average").get("gres/gpuutil")
        if util is not None:
            weight = float(_lenient_int(times.get("elapsed")) or 0)
            gpu_seen.append(float(util))
            gpu_sum += util * weight
            gpu_weight += weight

    usage: dict[str, Any] = {}
    if cpu_s is not None:
        put(usage, "cpu_time_s", cpu_s)
        if elapsed and ncores:
            put(usage, "cpu_eff_pct", 100.0 * cpu_s / (elapsed * ncores))
    if mem_bytes is not None:
        mem_mb = mem_bytes / 2**20
        put(usage, "mem_max_mb", mem_mb)
        per_node = _mem_per_node_mb(job, alloc_tres, ncores, nnodes)
        if per_node:
            put(usage, "mem_max_pct", 100.0 * mem_mb / per_node)
    if gpu_seen:
        # steps of no measurable length still count, equally, rather than not at all
        put(usage, "gpu_util_pct", gpu_sum / gpu_weight if gpu_weight
            else sum(gpu_seen) / len(gpu_seen))
    return usage


def _mem_per_node_mb(job: Mapping[str, Any], alloc_tres: Mapping[str, int],
                     ncores: int | None, nnodes: int | None) -> float | None:
    """MiB of memory per node the job was given (else asked for); None if unknown."""
    allocated = alloc_tres.get("mem")
    if allocated and nnodes:
        return allocated / nnodes
    required = job.get("required")
    if not isinstance(required, dict):
        return None
    per_node = _lenient_int(required.get("memory_per_node"))
    per_cpu = _lenient_int(required.get("memory_per_cpu"))
    legacy = required.get("memory")
    if isinstance(legacy, int) and not isinstance(legacy, bool) and legacy > 0:
        if legacy & _MEM_PER_CPU:
            per_cpu = _lenient_int(legacy & ~_MEM_PER_CPU)
        else:
            per_node = _lenient_int(legacy)
    if per_node:
        return float(per_node)
    if per_cpu and ncores and nnodes:
        return per_cpu * ncores / nnodes
    return None


def _usage_tres(step: Mapping[str, Any], stat: str) -> dict[str, int]:
    """``tres.requested.<stat>`` of a step (usage statistics, despite the name)."""
    tres = step.get("tres")
    requested = tres.get("requested") if isinstance(tres, dict) else None
    if not isinstance(requested, dict):
        return {}
    try:
        return tres_list_counts(requested.get(stat), f"tres.requested.{stat}")
    except ParseError:
        return {}


def _lenient_int(value: Any) -> int | None:
    # usage figures have had different widths across releases (jobacct's max_rss grew
    # from uint32_t to uint64_t): either width's sentinels are unset here
    try:
        number = slurm_int(value, "usage", sentinels=UINT32)
    except ParseError:
        return None
    return number if number is None or number >= 0 else None


def _seconds(value: Any) -> float | None:
    """``{"seconds": s, "microseconds": us}`` (every sacct version) as seconds."""
    if not isinstance(value, dict):
        return None
    sec, usec = _lenient_int(value.get("seconds")), _lenient_int(value.get("microseconds"))
    if sec is None or usec is None:
        return None
    return sec + usec / 1e6


def _sub(job: Mapping[str, Any], key: str, w: str) -> Mapping[str, Any]:
    value = job.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ParseError("bad-type", f"{w}{key} must be an object")
    return value


# --------------------------------------------------------------------------- shared

def _job_id(job: Mapping[str, Any], w: str) -> int:
    if "job_id" not in job:
        raise ParseError("missing-field", f"{w}job_id is missing")
    job_id = opt_int(job, "job_id", what=w)
    if job_id is None or job_id <= 0:
        raise ParseError("bad-value", f"{w}job_id: {job.get('job_id')!r} is not a job id")
    return job_id


def _restarts(job: Mapping[str, Any], w: str) -> int | None:
    count = opt_int(job, "restart_cnt", what=w, sentinels=UINT16)  # uint16_t
    if count is not None and not 0 <= count <= _MAX_RESTARTS:
        raise ParseError("bad-value", f"{w}restart_cnt: {count} is out of range")
    return count


def _put_limit(facts: dict[str, Any], minutes: int | None) -> None:
    # squeue and sacct count minutes; jobcomp counts seconds (docs/slurm.md, "jobcomp records")
    if minutes is not None and minutes >= 0:
        put(facts, "timelimit_s", minutes * 60)


def _put_array(facts: dict[str, Any], array_job_id: int | None, task: int | None) -> None:
    if array_job_id:  # 0 for jobs that are not array jobs
        put(facts, "array_id", str(array_job_id))
        put(facts, "array_task", task)


def _put_het(facts: dict[str, Any], het_id: int | None, offset: int | None) -> None:
    if het_id:
        put(facts, "het_id", str(het_id))
        put(facts, "het_offset", offset)


def _put_requests(facts: dict[str, Any], req: Mapping[str, int]) -> None:
    put(facts, "nodes_req", req.get("node"))
    put(facts, "cores_req", req.get("cpu"))
    put(facts, "gpus_req", gpu_count(req))
