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

Shapes from data_parser v0.0.38 (22.05) to v0.0.4x are read side by side (docs/slurm.md,
"Shape changes"):
``{set, infinite, number}`` objects, states as strings or lists, the two
``job_resources`` layouts, raw wait statuses or exit objects. sacct JSON exit codes are
wrong before v0.0.40 (23.11): there they are left out of the facts (the context keeps them
with ``exit_code_untrusted``); jobcomp, hooks or squeue give the real one.

The jobs are read by :mod:`pipeline.parsers.slurm_json_jobs` (and sacct's usage with them).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.core.model import JobEvent
from pipeline.parsers import Part, strict_events
from pipeline.parsers.slurm_common import (
    EventBuilder,
    decode_json,
    put,
    require_object,
    slurm_int,
)
from pipeline.parsers.slurm_json_jobs import SlurmJob, sacct_job, squeue_job
from pipeline.runtime.errors import ParseError

__all__ = ["REQUEUE_EVENTS", "SlurmMeta", "parse_sacct", "parse_squeue", "read_meta",
           "sacct_parts", "squeue_parts"]

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
        squeue_job(job, w), meta, cluster, "slurm-squeue", "squeue"))
        for i, job in enumerate(jobs)]


def sacct_parts(payload: bytes, *, cluster: str,
                received_at: float | None = None) -> list[Part]:
    """Every job of one ``sacct --json`` document, each with its events or its error."""
    what = "sacct document"
    meta, jobs = _document(payload, what)
    trust_exit = _sacct_exit_trusted(meta)
    return [_part(i, job, what, lambda job, w: _job_events(
        sacct_job(job, w, trust_exit), meta, cluster, "slurm-sacct", "sacct"))
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
    + ``slurm.version`` strings (docs/slurm.md, "sacct, squeue and scontrol")."""
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


def _job_events(job: SlurmJob, meta: SlurmMeta, cluster: str, source: str,
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


def _requeue_events(builder: EventBuilder, job: SlurmJob, identity: Mapping[str, Any]) -> None:
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
