"""``slurm-submit-plugin``: one line of jobstream's Slurm lua plugins -> events.

Two lua scripts ship with the edge (``pipeline/edges/hooks/``) and append one JSON object a
line to a local spool that the Slurm edge picks up (:mod:`pipeline.edges.slurm.submit`):

* ``cli_filter.lua`` (``CliFilterPlugins=lua``), run by ``sbatch``/``salloc``/``srun`` as
  the submitting user right after slurmctld gave the job its id: ``kind`` ``submit``, with
  ``job_id`` and what the user asked (partition, account, qos, name, time limit, hold).
* ``job_submit.lua`` (``JobSubmitPlugins=lua``), run inside slurmctld:
  ``kind`` ``modify`` for every change of a queued job (``slurm_job_modify`` sees the job
  record, so the id; only the fields the change sets are written), and ``kind``
  ``refused`` for a submission the site's policy refused.

Events:

* ``submit`` -> ``validate`` (RFC 21: the job was accepted), with the uid as its one fact
  and the request (partition, account, qos, name, ``timelimit_s``, hold) in its context:
  as facts they would undo a change made in the same second (the fold orders ``validate``
  after ``jobspec-update`` at one instant, and both clocks have whole seconds); squeue,
  sacct and jobcomp state them. Not ``submit``: cli_filter learns the id a moment after
  slurmctld stamped its submit time, so the time may be a second late, and the fold takes
  every ``submit`` time as a submit time (a later one opens a new incarnation of the id).
  The exact submit time comes from squeue, sacct or jobcomp.
* ``modify`` -> ``jobspec-update`` (Flux RFC 21's name for a change of a queued job's
  request), facts ``timelimit_s``, ``queue``, ``qos``, ``bank``, ``job_name`` where the
  change sets them; everything it sets (priority, nice, hold) in the context. A hold
  (priority 0) adds a ``reason`` event: ``JobHeldUser`` when the job's owner held it,
  ``JobHeldAdmin`` otherwise -- the state reason Slurm gives.
* ``refused`` has no job id (Slurm assigns it only after the plugin accepted the job), so
  no job event can carry it: the parser refuses it with ``submit-refused`` and the record
  goes to the DLQ with the user, partition and the policy's reason in its bytes, counted
  by ``jobstream_dlq_records_total{reason="submit-refused"}``. Synthetic job keys would
  make documents of jobs that never existed.

``time`` is epoch seconds (Lua's ``os.time()``). ``time_limit`` (job_submit) is in minutes
as Slurm's ``job_desc`` has it (NO_VAL: not set, INFINITE: unlimited, no fact);
``time_str`` (cli_filter) is the ``--time`` option as the user typed it.
"""

from __future__ import annotations

import re
from typing import Any

from pipeline.core.model import JobEvent
from pipeline.parsers.slurm_common import (
    NO_VAL,
    EventBuilder,
    decode_json,
    epoch,
    opt_str,
    payload_bytes,
    put,
    queue_name,
    require_object,
    slurm_int,
)
from pipeline.runtime.errors import ParseError

__all__ = ["SOURCE", "parse_submit_plugin", "time_limit_s"]

SOURCE = "slurm-submit-plugin"
FAMILY = "plugin"
KINDS = frozenset({"submit", "modify", "refused"})
#: record key -> (fact, kind of value) for the facts a submit or a change states
_STR_FACTS = {"partition": "queue", "account": "bank", "qos": "qos", "job_name": "job_name",
              "user": "user"}
#: keys kept in the event context when present (what the change or submission set)
_CONTEXT_KEYS = ("partition", "account", "qos", "job_name", "time_limit", "time_str",
                 "priority", "nice", "hold", "release", "by_uid", "step_id")
#: Slurm's time formats (sbatch --time): minutes, minutes:seconds, hours:minutes:seconds,
#: days-hours, days-hours:minutes, days-hours:minutes:seconds
_TIME_FORMATS = (
    (re.compile(r"(\d{1,9})"), ("m",)),
    (re.compile(r"(\d{1,9}):(\d{1,2})"), ("m", "s")),
    (re.compile(r"(\d{1,9}):(\d{1,2}):(\d{1,2})"), ("h", "m", "s")),
    (re.compile(r"(\d{1,9})-(\d{1,2})"), ("d", "h")),
    (re.compile(r"(\d{1,9})-(\d{1,2}):(\d{1,2})"), ("d", "h", "m")),
    (re.compile(r"(\d{1,9})-(\d{1,2}):(\d{1,2}):(\d{1,2})"), ("d", "h", "m", "s")),
)
_UNIT_S = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_MAX_LINE = 64 * 1024


def parse_submit_plugin(payload: bytes, *, cluster: str,
                        received_at: float | None = None) -> list[JobEvent]:
    """The events of one plugin line (see the module docstring)."""
    data = payload_bytes(payload, what="submit plugin payload")
    if len(data) > _MAX_LINE:
        raise ParseError("too-large", f"submit plugin line over {_MAX_LINE} bytes")
    rec = require_object(decode_json(data, what="submit plugin line"),
                         what="submit plugin line")
    kind = rec.get("kind")
    if kind not in KINDS:
        raise ParseError("bad-value", f"kind: {str(kind)[:40]!r} is not one of "
                         + ", ".join(sorted(KINDS)))
    when = epoch(rec.get("time"), "time")
    if when is None:
        raise ParseError("missing-time", "submit plugin line has no time")
    if kind == "refused":
        user = opt_str(rec, "user") or str(slurm_int(rec.get("uid"), "uid"))
        reason = opt_str(rec, "reason") or "no reason given"
        raise ParseError("submit-refused", f"submission by {user[:64]} to partition "
                         f"{(opt_str(rec, 'partition') or 'default')[:64]} refused: "
                         f"{reason[:200]}")
    job_id = slurm_int(rec.get("job_id"), "job_id")
    if job_id is None or job_id <= 0:
        raise ParseError("missing-field" if rec.get("job_id") is None else "bad-value",
                         f"{kind} line has no job id")
    facts = _facts(rec)
    context = {k: rec[k] for k in _CONTEXT_KEYS if rec.get(k) is not None}
    builder = EventBuilder(cluster=opt_str(rec, "cluster") or cluster, job_id=str(job_id),
                           source=SOURCE, family=FAMILY)
    if kind == "submit":
        put(context, "timelimit_s", facts.get("timelimit_s"))
        builder.add("validate", when, facts={k: v for k, v in facts.items() if k == "uid"},
                    context=context)
        return builder.events
    by_uid = slurm_int(rec.get("by_uid"), "by_uid")
    # two changes within one second are distinct facts: the id tells them apart by content
    builder.add("jobspec-update", when, facts=facts, context=context,
                id_extra=sorted(context.items()))
    if rec.get("hold") is True:
        owner = slurm_int(rec.get("uid"), "uid")
        reason = "JobHeldUser" if by_uid is not None and by_uid == owner else "JobHeldAdmin"
        builder.add("reason", when, facts={}, context={"state_reason": reason})
    return builder.events


def _facts(rec: dict[str, Any] | Any) -> dict[str, Any]:
    facts: dict[str, Any] = {}
    for key, fact in _STR_FACTS.items():
        value = opt_str(rec, key)
        put(facts, fact, queue_name(value) if fact == "queue" else value)
    put(facts, "uid", slurm_int(rec.get("uid"), "uid"))
    minutes = slurm_int(rec.get("time_limit"), "time_limit")
    if minutes is not None:
        if minutes < 0:
            raise ParseError("bad-value", f"time_limit: {minutes} minutes")
        put(facts, "timelimit_s", minutes * 60)
    put(facts, "timelimit_s", time_limit_s(opt_str(rec, "time_str")))
    for flag in ("hold", "release"):
        if rec.get(flag) is not None and not isinstance(rec[flag], bool):
            raise ParseError("bad-type", f"{flag} must be true or false")
    for key in ("priority", "nice", "by_uid", "step_id"):
        value = rec.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ParseError("bad-type", f"{key} must be an integer")
        slurm_int(value, key)  # a 64-bit one: the context keeps it
    return facts


def time_limit_s(text: str | None) -> int | None:
    """Seconds of an sbatch ``--time`` value as cli_filter sees it; None when absent,
    unset or unlimited. Slurm rounds seconds up to whole minutes."""
    if text is None or text.strip().upper() in ("UNLIMITED", "INFINITE", "-1"):
        return None
    for pattern, units in _TIME_FORMATS:
        m = pattern.fullmatch(text.strip())
        if m is not None:
            seconds = sum(int(v) * _UNIT_S[u] for v, u in zip(m.groups(), units, strict=True))
            minutes = -(-seconds // 60)
            # an unset limit: Slurm's option getter formats NO_VAL minutes as a time
            # (22.05: "2982616-04:14:00")
            return None if minutes >= NO_VAL else minutes * 60
    raise ParseError("bad-value", f"time_str: {text[:40]!r} is not a Slurm time limit")
