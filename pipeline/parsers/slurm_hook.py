"""``slurm-hook``: the environment of a PrologSlurmctld or EpilogSlurmctld run -> one event.

PrologSlurmctld runs on the slurmctld host when the allocation is granted, before the job
launches (docs/slurm.md, "The hooks"): its moment is ``alloc``, with the placement facts (node list,
node and CPU counts, partition). EpilogSlurmctld runs when the allocation ends: its moment
is ``end``, with the exit code from ``SLURM_JOB_EXIT_CODE`` (raw wait status) or
``SLURM_JOB_EXIT_CODE2`` (``exit:signal``). The environment never states the job's final
state, so an epilog ``end`` has no ``result``: jobcomp or sacct will say it; guessing it
from the exit code would be wrong for timeouts, cancellations and OOM kills.

The environment carries no time of its own. The hook scripts add ``JOBSTREAM_HOOK_TIME``
(epoch seconds); without it the edge's ``received_at`` is used; without both the record is
rejected (``missing-time``). ``SLURM_JOB_START_TIME``/``SLURM_JOB_END_TIME`` (23.02+) give
``t_start``, and ``t_end`` (epilog) or ``expiration`` (prolog: the expected end).

The payload is ``KEY=VALUE`` lines (``env | sort``, as in the vectors) or a JSON object of
the same keys. The environment is private (docs/design.md, "Guarantees"): only the
``SLURM_*`` keys read here
are kept, in the event's context; every other variable is dropped unread, and only the
values of keys read are decoded, so a private variable in another encoding is harmless.

What hooks cannot tell: the result; jobs that never start (no hook runs for them); GPUs
(only the node-side prolog sees them); whether an ended run is going to be requeued.
"""

from __future__ import annotations

import math
import re
from typing import Any

from pipeline.core.model import JobEvent
from pipeline.parsers.slurm_common import (
    UINT16,
    UINT32,
    EventBuilder,
    decode_json,
    epoch,
    exit_from_pair,
    exit_from_wait_status,
    expand_nodes,
    payload_bytes,
    put,
    require_object,
    slurm_int,
)
from pipeline.runtime.errors import ParseError

__all__ = ["parse_hook"]

SOURCE = "slurm-hook"
FAMILY = "hook"
TIME_KEY = "JOBSTREAM_HOOK_TIME"

#: fact name -> environment key holding it, for the plain string and integer facts
_STR_FACTS = {
    "job_name": "SLURM_JOB_NAME", "user": "SLURM_JOB_USER", "group": "SLURM_JOB_GROUP",
    "bank": "SLURM_JOB_ACCOUNT", "queue": "SLURM_JOB_PARTITION", "qos": "SLURM_JOB_QOS",
    "cwd": "SLURM_JOB_WORK_DIR",
}
_INT_FACTS = {
    "uid": "SLURM_JOB_UID", "gid": "SLURM_JOB_GID", "nnodes": "SLURM_JOB_NUM_NODES",
    "restart_count": "SLURM_JOB_RESTART_COUNT",
}
#: the width of each integer fact's field in Slurm's job record (uint32_t unless here):
#: its sentinels, and only its, mean unset
_INT_WIDTH = {"restart_count": UINT16}
#: Every key this parser reads; nothing else of the environment is kept.
USED_KEYS: frozenset[str] = frozenset({
    *_STR_FACTS.values(), *_INT_FACTS.values(), TIME_KEY,
    "SLURM_SCRIPT_CONTEXT", "SLURM_JOB_ID", "SLURM_JOBID", "SLURM_CLUSTER_NAME",
    "SLURM_JOB_NODELIST", "SLURM_JOB_CPUS_PER_NODE", "SLURM_JOB_START_TIME",
    "SLURM_JOB_END_TIME", "SLURM_JOB_EXIT_CODE", "SLURM_JOB_EXIT_CODE2",
    "SLURM_JOB_DERIVED_EC", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID",
    "SLURM_HET_JOB_ID", "SLURM_HET_JOB_OFFSET", "SLURM_PACK_JOB_ID", "SLURM_PACK_JOB_OFFSET",
    "SLURM_JOB_SLUID",
})
_EVENT_OF_CONTEXT = {"prolog_slurmctld": "alloc", "epilog_slurmctld": "end"}


def parse_hook(payload: bytes, *, cluster: str,
               received_at: float | None = None) -> list[JobEvent]:
    """The ``alloc`` (prolog) or ``end`` (epilog) event of one hook environment."""
    env = _read_env(payload)
    script_context = env.get("SLURM_SCRIPT_CONTEXT")
    if script_context is None:
        raise ParseError("missing-field", "hook environment has no SLURM_SCRIPT_CONTEXT")
    event = _EVENT_OF_CONTEXT.get(script_context)
    if event is None:
        raise ParseError("bad-value", f"SLURM_SCRIPT_CONTEXT: {script_context[:40]!r} is not "
                         "prolog_slurmctld or epilog_slurmctld")
    job_key = "SLURM_JOB_ID" if "SLURM_JOB_ID" in env else "SLURM_JOBID"
    if job_key not in env:
        raise ParseError("missing-field", "hook environment has no SLURM_JOB_ID")
    job_id = slurm_int(env[job_key], job_key)
    if job_id is None or job_id <= 0:
        raise ParseError("bad-value", f"{job_key}: {env[job_key][:40]!r} is not a job id")

    facts = _facts(env, event)
    builder = EventBuilder(cluster=env.get("SLURM_CLUSTER_NAME") or cluster,
                           job_id=str(job_id), source=SOURCE, family=FAMILY)
    context = {k: v for k, v in sorted(env.items()) if k.startswith("SLURM_")}
    builder.add(event, _hook_time(env, received_at), facts=facts, context=context)
    return builder.events


def _facts(env: dict[str, str], event: str) -> dict[str, Any]:
    facts: dict[str, Any] = {}
    for name, key in _STR_FACTS.items():
        put(facts, name, env.get(key) or None)
    for name, key in _INT_FACTS.items():
        put(facts, name, slurm_int(env.get(key), key, sentinels=_INT_WIDTH.get(name, UINT32)))
    put(facts, "nodelist", expand_nodes(env.get("SLURM_JOB_NODELIST"), "SLURM_JOB_NODELIST"))
    put(facts, "ncores", _cpus_per_node_total(env.get("SLURM_JOB_CPUS_PER_NODE")))
    array_id = slurm_int(env.get("SLURM_ARRAY_JOB_ID"), "SLURM_ARRAY_JOB_ID")
    if array_id:
        put(facts, "array_id", str(array_id))
        put(facts, "array_task", slurm_int(env.get("SLURM_ARRAY_TASK_ID"),
                                           "SLURM_ARRAY_TASK_ID"))
    het = "SLURM_HET_JOB" if "SLURM_HET_JOB_ID" in env else "SLURM_PACK_JOB"
    het_id = slurm_int(env.get(f"{het}_ID"), f"{het}_ID")
    if het_id:
        put(facts, "het_id", str(het_id))
        put(facts, "het_offset", slurm_int(env.get(f"{het}_OFFSET"), f"{het}_OFFSET"))
    put(facts, "t_start", epoch(env.get("SLURM_JOB_START_TIME"), "SLURM_JOB_START_TIME"))
    end_time = epoch(env.get("SLURM_JOB_END_TIME"), "SLURM_JOB_END_TIME")
    if event == "alloc":
        put(facts, "expiration", end_time)  # in the prolog: the expected end
        return facts
    put(facts, "t_end", end_time)
    pair = exit_from_wait_status(env.get("SLURM_JOB_EXIT_CODE"), "SLURM_JOB_EXIT_CODE")
    if pair is None:
        pair = exit_from_pair(env.get("SLURM_JOB_EXIT_CODE2"), "SLURM_JOB_EXIT_CODE2")
    if pair is not None:
        facts["exit_code"] = pair[0]
        if pair[1]:
            facts["signal"] = pair[1]
    return facts


#: the job state holds counts as 64-bit signed integers (Avro ``long``)
_MAX_CPUS = 2**63 - 1
#: One item of SLURM_JOB_CPUS_PER_NODE: ``2(x3)`` or ``1``
_CPUS_ITEM = re.compile(r"\s*(\d{1,9})(?:\(x(\d{1,9})\))?\s*")


def _cpus_per_node_total(value: str | None) -> int | None:
    """``"2(x3),1"`` (2 CPUs on each of 3 nodes, then 1) -> 7."""
    if not value:
        return None
    total = 0
    for item in value.split(","):
        m = _CPUS_ITEM.fullmatch(item)
        if m is None:
            raise ParseError("bad-value",
                             f"SLURM_JOB_CPUS_PER_NODE: {value[:40]!r} is not a CPU count list")
        total += int(m[1]) * int(m[2] or 1)
        if total > _MAX_CPUS:
            raise ParseError("bad-value", f"SLURM_JOB_CPUS_PER_NODE: {value[:40]!r} adds up "
                             "to more CPUs than a 64-bit count holds")
    return total


def _hook_time(env: dict[str, str], received_at: float | None) -> float:
    stamped = epoch(env.get(TIME_KEY), TIME_KEY)
    if stamped is not None:
        return stamped
    if received_at is None:
        raise ParseError("missing-time", f"hook environment has no {TIME_KEY} and the "
                         "record no received_at time")
    if (isinstance(received_at, bool) or not isinstance(received_at, int | float)
            or not math.isfinite(received_at) or received_at <= 0):
        raise ParseError("bad-time", f"received_at: {received_at!r} is not an epoch time")
    return float(received_at)


# --------------------------------------------------------------------------- input

def _read_env(payload: bytes) -> dict[str, str]:
    data = payload_bytes(payload, what="hook payload").rstrip(b"\x00")
    if data.lstrip()[:1] in (b"{", b"["):
        return _env_from_json(data)
    return _env_from_lines(data)


def _env_from_json(data: bytes) -> dict[str, str]:
    obj = require_object(decode_json(data, what="hook environment"), what="hook environment")
    env: dict[str, str] = {}
    for key in USED_KEYS & obj.keys():
        value = obj[key]
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise ParseError("bad-type", f"{key} must be a string or a number")
        if isinstance(value, float) and not math.isfinite(value):
            raise ParseError("bad-type", f"{key} must be a finite number")
        env[key] = value if isinstance(value, str) else repr(value)
    return env


def _env_from_lines(data: bytes) -> dict[str, str]:
    """``KEY=VALUE`` lines. Lines without ``=`` (continuations of multi-line values of
    other variables in ``env`` output) and unknown keys are skipped unread."""
    env: dict[str, str] = {}
    for line in data.split(b"\n"):
        key_bytes, sep, value_bytes = line.rstrip(b"\r").partition(b"=")
        if not sep:
            continue
        key = key_bytes.strip().decode("ascii", "replace")
        if key not in USED_KEYS:
            continue
        try:
            value = value_bytes.decode("utf-8")
        except UnicodeDecodeError:
            raise ParseError("invalid-utf8", f"{key} is not UTF-8") from None
        if key in env and env[key] != value:
            # a line of another variable's multi-line value can look like one of ours;
            # two different values leave the job ambiguous
            raise ParseError("bad-value", f"{key} appears twice with different values")
        env[key] = value
    return env
