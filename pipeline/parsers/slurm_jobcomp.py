"""``slurm-jobcomp``: one jobcomp/kafka or jobcomp/elasticsearch record -> canonical events.

Both plugins serialize the same record (docs/slurm.md, "jobcomp records"; 22.05 has the
same field set minus a few keys). One record describes several moments at once, so it
yields several events:

* ``submit`` at ``@submit`` and ``eligible`` at ``@eligible``;
* ``start`` at ``@start`` when the job really started: a job cancelled while pending gets
  ``@start`` equal to ``@end`` (or "Unknown") and no nodes, so it gets no start event and
  the fold can tell ``cancelled_before_start``;
* the record's own moment: ``end`` at ``@end`` for a finish record (state COMPLETED,
  FAILED, ...), ``requeue`` at ``@end`` for the interrupted run of a requeued job, the
  ``start`` itself for a 25.05+ job-start record (``state: null``, no ``@end``), and
  ``resource-update`` for a resize record.

Every event carries the job's identity facts; the moment's own facts ride on its event
(allocation on ``start``, result and exit on ``end``), and the final event carries the
record itself without its batch script or environment (privacy: docs/design.md, "Guarantees").

What jobcomp cannot tell: the restart count (a requeue after a node failure is recorded
as NODE_FAIL and looks final until the job's next record arrives); before 25.05 the
partition is the comma list of requested partitions (then ``queue`` is left out); the
``@start`` of a resized job's final record is the resize time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.core.model import JobEvent
from pipeline.parsers.slurm_common import (
    EventBuilder,
    classify_state,
    decode_json,
    epoch,
    exit_from_pair,
    expand_nodes,
    gpu_count,
    has_nodes,
    opt_int,
    opt_str,
    put,
    queue_name,
    require_object,
    scrub_record,
    tres_counts,
)
from pipeline.runtime.errors import ParseError

__all__ = ["parse_jobcomp"]

SOURCE = "slurm-jobcomp"
FAMILY = "jobcomp"

#: Keys copied into an event's context, by the event they belong to.
_END_CONTEXT = ("state", "exit_code", "derived_ec", "elapsed", "failed_node", "@end",
                "partition")


def parse_jobcomp(payload: bytes, *, cluster: str,
                  received_at: float | None = None) -> list[JobEvent]:
    """Canonical events of one jobcomp record (``received_at`` is unused: records carry
    their own times)."""
    rec = require_object(decode_json(payload, what="jobcomp record"), what="jobcomp record")
    if "jobid" not in rec:
        raise ParseError("missing-field", "jobcomp record has no jobid")
    job_id = opt_int(rec, "jobid")
    if job_id is None or job_id <= 0:
        raise ParseError("bad-value", f"jobid: {rec.get('jobid')!r} is not a job id")
    if "state" not in rec:
        raise ParseError("missing-field", f"jobcomp record of job {job_id} has no state")

    builder = EventBuilder(cluster=opt_str(rec, "cluster") or cluster, job_id=str(job_id),
                           source=SOURCE, family=FAMILY)
    identity = _identity(rec)
    common_ctx = {"sluid": rec["sluid"]} if isinstance(rec.get("sluid"), str) else {}
    t_submit = epoch(rec.get("@submit"), "@submit")
    t_eligible = epoch(rec.get("@eligible"), "@eligible")
    t_start = epoch(rec.get("@start"), "@start")
    nodes = opt_str(rec, "nodes")
    started = t_start is not None and has_nodes(nodes)
    alloc = _allocation(rec, nodes) if started else {}

    times: dict[str, Any] = {}
    put(times, "t_submit", t_submit)
    put(times, "t_eligible", t_eligible)
    if t_submit is not None:
        builder.add("submit", t_submit, facts={**identity, "t_submit": t_submit},
                    context={**common_ctx, "@submit": rec["@submit"]})
    if t_eligible is not None:
        builder.add("eligible", t_eligible, facts={**identity, "t_eligible": t_eligible},
                    context={**common_ctx, "@eligible": rec["@eligible"],
                             **_pick(rec, ("@queue_wait",))})
    record = scrub_record(rec)

    if rec["state"] is None:  # 25.05+ job-start record (docs/slurm.md, "jobcomp records")
        if started:
            assert t_start is not None
            builder.add("start", t_start, facts={**identity, **times, **alloc,
                                                 "t_start": t_start},
                        context={**common_ctx, "@start": rec["@start"], "nodes": nodes},
                        record=record)
        return builder.events

    state = classify_state(rec["state"], "state")
    if started and "RESIZING" not in state.flags:
        assert t_start is not None
        times["t_start"] = t_start
        builder.add("start", t_start, facts={**identity, **alloc, "t_start": t_start},
                    context={**common_ctx, "@start": rec["@start"], "nodes": nodes})

    t_end = epoch(rec.get("@end"), "@end")
    if t_end is None:
        raise ParseError("missing-field",
                         f"jobcomp finish record of job {job_id} has no valid @end")
    end_ctx = {**common_ctx, **_pick(rec, _END_CONTEXT)}
    if "RESIZING" in state.flags:
        builder.add("resource-update", t_end, facts=identity, context=end_ctx, record=record)
    elif state.requeued or state.base == "PENDING":
        # The interrupted run of a requeued job. Its base state is masked to PENDING by
        # the JOB_REQUEUE flag in jobcomp_common.c; REQUEUED is what sacct calls it.
        builder.add("requeue", t_end, facts={**identity, **times, "t_end": t_end},
                    context=end_ctx, record=record)
    elif state.result is not None:
        end = {**identity, **times, **alloc, "t_end": t_end, "result": state.result}
        exit_pair = exit_from_pair(rec.get("exit_code"), "exit_code")
        if exit_pair is not None:
            end["exit_code"] = exit_pair[0]
            if exit_pair[1]:
                end["signal"] = exit_pair[1]
        if not started:
            end_ctx["never_started"] = True
        builder.add("end", t_end, facts=end, context=end_ctx, record=record)
    else:
        raise ParseError("bad-state", f"state: {rec['state']!r} is not the state of a "
                         "finished job")
    return builder.events


def _identity(rec: Mapping[str, Any]) -> dict[str, Any]:
    """Who, where and what was asked: true at every moment of the job."""
    facts: dict[str, Any] = {}
    put(facts, "job_name", opt_str(rec, "job_name"))
    put(facts, "user", opt_str(rec, "username"))
    put(facts, "uid", opt_int(rec, "user_id"))
    put(facts, "group", opt_str(rec, "groupname"))
    put(facts, "gid", opt_int(rec, "group_id"))
    put(facts, "bank", opt_str(rec, "account"))
    put(facts, "queue", queue_name(opt_str(rec, "partition")))
    put(facts, "qos", opt_str(rec, "qos"))
    put(facts, "cwd", opt_str(rec, "work_dir"))
    # seconds in jobcomp (minutes * 60: docs/slurm.md, "jobcomp records")
    limit = opt_int(rec, "time_limit")
    put(facts, "timelimit_s", limit)
    if "array_task_id" in rec:  # only array tasks have it (jobid stays the raw id)
        put(facts, "array_id", _id_str(opt_int(rec, "array_job_id")))
        put(facts, "array_task", opt_int(rec, "array_task_id"))
    het_key = "het_job_id" if "het_job_id" in rec else "pack_job_id"
    het_id = opt_int(rec, het_key)
    if het_id:  # non-het jobs carry 0 (docs/slurm.md, "jobcomp records")
        put(facts, "het_id", str(het_id))
        put(facts, "het_offset", opt_int(rec, het_key.replace("_id", "_offset")))
    req = tres_counts(rec.get("tres_req"), "tres_req")
    put(facts, "nodes_req", req.get("node"))
    put(facts, "cores_req", req.get("cpu"))
    put(facts, "gpus_req", gpu_count(req))
    return facts


def _allocation(rec: Mapping[str, Any], nodes: str | None) -> dict[str, Any]:
    """What the job was given; only meaningful once it started."""
    facts: dict[str, Any] = {}
    put(facts, "nodelist", expand_nodes(nodes, "nodes"))
    alloc = tres_counts(rec.get("tres_alloc"), "tres_alloc")
    put(facts, "nnodes", opt_int(rec, "total_nodes") or alloc.get("node"))
    put(facts, "ncores", opt_int(rec, "total_cpus") or alloc.get("cpu"))
    put(facts, "ngpus", gpu_count(alloc))
    return facts


def _pick(rec: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: rec[k] for k in keys if k in rec}


def _id_str(value: int | None) -> str | None:
    return str(value) if value else None
