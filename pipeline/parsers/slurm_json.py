"""``slurm-squeue`` and ``slurm-sacct``: ``squeue --json`` / ``sacct --json`` documents.

A document is a snapshot: for every job it lists, we emit the events its observed state
implies, each at the time Slurm states for it (never the poll time), so the same job seen
in many polls yields the same event ids and the dedupe stage drops the repeats:

* ``submit`` at the submit time, ``eligible`` at the eligible time (when known);
* ``start`` at the start time once the job has really started (not pending, has nodes:
  a pending job's start time is only the scheduler's expectation);
* ``requeue`` for each of the last :data:`REQUEUE_EVENTS` (16) restart indices, up to the
  restart count, at the job's current submit time (Slurm does not say when it requeued; it
  resets the submit time of a requeued run). The ``restart_count`` fact of each is its
  index, so ``requeue_count`` is the highest index seen, never the number of requeue
  events, and stays exact however few are stated. Not one event per restart:
  ``restart_cnt`` is a uint16_t, and up to 65,535 events from one record would each grow
  the job's state. A poll sees the restarts as they happen, so every restart still gets
  its event unless more than 16 fall between two polls of the job;
* ``end`` at the end time with ``result`` when the state is final;
* ``reason`` while the job is pending with a ``state_reason`` other than ``None``, at the
  submit time, one event (id) per reason: Slurm gives no time at which a reason began
  (``last_sched_evaluation`` changes at every scheduling cycle, so events stamped with it
  would pile up in a pending job's state), and the fold ranks the reasons a run was seen
  with (``pipeline.fold``, ``pending_reason``).

A pending array's meta-record (``array_task_string: "1-3"``) stands for tasks not yet
split off; it yields events for its own (meta) job id only. Each task gets its own job id
and its own record once it is split off.

Each job of a document is parsed on its own (:func:`squeue_parts`, :func:`sacct_parts`): a
job with a bad field is refused as a :class:`pipeline.parsers.Part` with its error and its
own JSON, and the document's other jobs keep their events. Only a bad document (not JSON,
no ``jobs``, a ``meta`` that cannot be read) is refused whole.

Shapes from data_parser v0.0.38 (22.05) to v0.0.4x are read side by side (slurm.md 2.5):
``{set, infinite, number}`` objects, states as strings or lists, the two
``job_resources`` layouts, raw wait statuses or exit objects. sacct JSON exit codes are
wrong before v0.0.40 (23.11): there they are left out of the facts (the context keeps them
with ``exit_code_untrusted``); jobcomp, hooks or squeue give the real one.

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

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeline.core.model import JobEvent
from pipeline.parsers import Part, strict_events
from pipeline.parsers.slurm_common import (
    UINT16,
    UINT32,
    EventBuilder,
    StateInfo,
    classify_state,
    decode_json,
    epoch,
    exit_from_object,
    expand_nodes,
    gpu_count,
    has_nodes,
    opt_int,
    opt_str,
    put,
    queue_name,
    require_object,
    scrub_record,
    slurm_int,
    tres_counts,
    tres_list_counts,
)
from pipeline.runtime.errors import ParseError

__all__ = ["REQUEUE_EVENTS", "SlurmMeta", "parse_sacct", "parse_squeue", "read_meta",
           "sacct_parts", "squeue_parts"]

#: restart_cnt is a uint16 in Slurm; more is garbage.
_MAX_RESTARTS = 0xFFFF
#: requeue events stated for a job's latest restarts, at most (module docstring)
REQUEUE_EVENTS = 16
#: ``data_parser/v0.0.44`` and ``25.11.0``: versions in ``meta``, compiled once (every
#: document reads them).
_PARSER_VERSION = re.compile(r"v(\d{1,4})\.(\d{1,4})\.(\d{1,4})")
_RELEASE = re.compile(r"(\d{1,4})\.(\d{1,4})(?:\.(\d{1,4}))?")


@dataclass(frozen=True, slots=True)
class SlurmMeta:
    """What a document's ``meta`` says about the Slurm that wrote it."""

    data_parser: tuple[int, int, int] | None
    slurm: tuple[int, int, int] | None
    cluster: str | None


@dataclass(slots=True)
class _Job:
    """One job of a document, normalized; what :func:`_job_events` needs."""

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


def parse_squeue(payload: bytes, *, cluster: str,
                 received_at: float | None = None) -> list[JobEvent]:
    """Events of every job of one ``squeue --json`` (or ``scontrol show job --json``);
    the first bad job's ParseError if any job is bad."""
    return strict_events(squeue_parts(payload, cluster=cluster))


def parse_sacct(payload: bytes, *, cluster: str,
                received_at: float | None = None) -> list[JobEvent]:
    """Events of every job of one ``sacct --json`` document; the first bad job's ParseError
    if any job is bad."""
    return strict_events(sacct_parts(payload, cluster=cluster))


def squeue_parts(payload: bytes, *, cluster: str,
                 received_at: float | None = None) -> list[Part]:
    """Every job of one ``squeue --json`` document, each with its events or its error."""
    what = "squeue document"
    meta, jobs = _document(payload, what)
    return [_part(i, job, what, lambda job, w: _job_events(
        _squeue_job(job, w), meta, cluster, "slurm-squeue", "squeue"))
        for i, job in enumerate(jobs)]


def sacct_parts(payload: bytes, *, cluster: str,
                received_at: float | None = None) -> list[Part]:
    """Every job of one ``sacct --json`` document, each with its events or its error."""
    what = "sacct document"
    meta, jobs = _document(payload, what)
    trust_exit = _sacct_exit_trusted(meta)
    return [_part(i, job, what, lambda job, w: _job_events(
        _sacct_job(job, w, trust_exit), meta, cluster, "slurm-sacct", "sacct"))
        for i, job in enumerate(jobs)]


def _part(index: int, job: Any, what: str,
          events_of: Callable[[Mapping[str, Any], str], list[JobEvent]]) -> Part:
    """One job's part. A parser bug met in one job is that job's ``internal-error`` (the
    exception kept as the error's cause, for the log), not its neighbours'."""
    try:
        require_object(job, what=f"{what} jobs[{index}]")
        return Part(index, events_of(job, f"jobs[{index}]."), source=job)
    except ParseError as exc:
        return Part(index, error=exc, source=job)
    except Exception as exc:  # noqa: BLE001 - the caller logs it with its traceback
        error = ParseError("internal-error", f"jobs[{index}]: {type(exc).__name__}: {exc}")
        error.__cause__ = exc
        return Part(index, error=error, source=job)


# --------------------------------------------------------------------------- document

def _document(payload: bytes, what: str) -> tuple[SlurmMeta, list[Any]]:
    doc = require_object(decode_json(payload, what=what), what=what)
    meta = read_meta(doc.get("meta"))
    jobs = doc.get("jobs")
    if jobs is None:
        errors = doc.get("errors")
        if isinstance(errors, list) and errors:
            raise ParseError("source-error", f"{what} has no jobs, only errors: "
                             f"{str(errors[0])[:200]}")
        raise ParseError("missing-field", f"{what} has no jobs")
    if not isinstance(jobs, list):
        raise ParseError("bad-type", f"{what}: jobs must be an array")
    return meta, jobs


def read_meta(meta: Any) -> SlurmMeta:
    """Versions from ``meta`` of every layout: v0.0.38 ``plugin.type`` +
    ``Slurm.version`` ints, v0.0.39 ``plugins.data_parser``, v0.0.40+ ``plugin.data_parser``
    + ``slurm.version`` strings (slurm.md 2.2)."""
    if meta is None:
        return SlurmMeta(None, None, None)
    if not isinstance(meta, dict):
        raise ParseError("bad-type", "meta must be an object")
    parser_words: list[str] = []
    for key in ("plugin", "plugins"):
        plugin = meta.get(key)
        if isinstance(plugin, dict):
            parser_words += [v for k, v in plugin.items()
                             if k in ("type", "data_parser") and isinstance(v, str)]
    data_parser = None
    for word in parser_words:
        m = _PARSER_VERSION.search(word)
        if m:
            data_parser = (int(m[1]), int(m[2]), int(m[3]))
            break
    slurm_meta = meta.get("slurm", meta.get("Slurm"))
    slurm = None
    cluster = None
    if isinstance(slurm_meta, dict):
        slurm = _slurm_version(slurm_meta)
        value = slurm_meta.get("cluster")
        cluster = value if isinstance(value, str) and value else None
    return SlurmMeta(data_parser, slurm, cluster)


def _slurm_version(slurm_meta: Mapping[str, Any]) -> tuple[int, int, int] | None:
    version = slurm_meta.get("version")
    if isinstance(version, dict):
        try:
            parts = [slurm_int(version.get(k), f"meta.slurm.version.{k}")
                     for k in ("major", "minor", "micro")]
        except ParseError:
            raise ParseError("unknown-version", "meta.slurm.version is not numeric") from None
        if parts[0] is not None and parts[1] is not None:
            return parts[0], parts[1], parts[2] or 0
    release = slurm_meta.get("release")
    if isinstance(release, str):
        m = _RELEASE.match(release)
        if m:
            return int(m[1]), int(m[2]), int(m[3] or 0)
    return None


def _sacct_exit_trusted(meta: SlurmMeta) -> bool:
    """sacct JSON exit codes are right only from data_parser v0.0.40 (Slurm 23.11) on."""
    if meta.data_parser is not None:
        return meta.data_parser >= (0, 0, 40)
    if meta.slurm is not None:
        return meta.slurm >= (23, 11, 0)
    raise ParseError("unknown-version", "sacct document: meta names neither the data_parser "
                     "nor the Slurm version, so its exit codes cannot be trusted or not")


# --------------------------------------------------------------------------- squeue job

def _squeue_job(job: Mapping[str, Any], w: str) -> _Job:
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
    return _Job(
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

def _sacct_job(job: Mapping[str, Any], w: str, trust_exit: bool) -> _Job:
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
    return _Job(
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
    # squeue and sacct count minutes; jobcomp counts seconds (slurm.md 4.6)
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


def _job_events(job: _Job, meta: SlurmMeta, cluster: str, source: str,
                family: str) -> list[JobEvent]:
    builder = EventBuilder(cluster=job.cluster or meta.cluster or cluster,
                           job_id=str(job.job_id), source=source, family=family)
    identity = dict(job.identity)
    put(identity, "restart_count", job.restart_count)
    ctx = job.context
    times: dict[str, Any] = {}
    if job.t_submit is not None:
        times["t_submit"] = job.t_submit
        builder.add("submit", job.t_submit, facts={**identity, "t_submit": job.t_submit},
                    context=ctx)
    if job.t_eligible is not None:
        times["t_eligible"] = job.t_eligible
        builder.add("eligible", job.t_eligible,
                    facts={**identity, "t_eligible": job.t_eligible}, context=ctx)
    started = job.t_start is not None and bool(job.nodelist) and not job.state.pending
    if started:
        assert job.t_start is not None
        times["t_start"] = job.t_start
        builder.add("start", job.t_start,
                    facts={**identity, **job.alloc, "t_start": job.t_start}, context=ctx)
    reason = job.context.get("state_reason")
    if job.state.pending and job.t_submit is not None and reason not in (None, "None"):
        builder.add("reason", job.t_submit, facts={**identity, "t_submit": job.t_submit},
                    context=ctx, id_extra=(reason,))
    _requeue_events(builder, job, identity)
    result = job.state.result
    if result is None:
        return builder.events
    if job.t_end is None:
        raise ParseError("missing-field",
                         f"job {job.job_id} is {result} but has no end time")
    end = {**identity, **times, "t_end": job.t_end, "result": result}
    if started:
        end.update(job.alloc)
        end.update(job.usage)
    if job.exit_pair is not None:
        end["exit_code"] = job.exit_pair[0]
        if job.exit_pair[1]:
            end["signal"] = job.exit_pair[1]
    end_ctx = dict(ctx) if started else {**ctx, "never_started": True}
    builder.add("end", job.t_end, facts=end, context=end_ctx, record=job.record)
    return builder.events


def _requeue_events(builder: EventBuilder, job: _Job, identity: Mapping[str, Any]) -> None:
    at = job.t_submit or job.t_eligible or job.t_start
    if at is None:
        return
    count = job.restart_count or 0
    if count == 0 and job.state.requeued:
        # v0.0.38 sacct has no restart_cnt; the state still says it was requeued
        facts = {k: v for k, v in identity.items() if k != "restart_count"}
        builder.add("requeue", job.t_end or at, facts=facts, context=job.context,
                    id_extra=("state",))
        return
    for index in range(max(1, count - REQUEUE_EVENTS + 1), count + 1):
        builder.add("requeue", at, facts={**identity, "restart_count": index},
                    context={**job.context, "restart_index": index}, id_extra=(index,))
