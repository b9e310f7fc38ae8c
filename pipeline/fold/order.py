"""The order of a job's events: the total order the fold applies them in, one event made of
two copies of an id, and the cut of a Slurm job id's events into incarnations and runs.

These are what make a fold independent of the order and duplication of its input
(:mod:`pipeline.fold`, steps 1 and 2, "Identity" and "Runs"): every other part of the
fold sees a job's events deduplicated, merged and sorted by :func:`event_order`.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from pipeline.core.jsontext import canonical
from pipeline.core.model import RESULTS, JobEvent

__all__ = ["assign", "event_order", "is_final", "merge_variants", "split_incarnations",
           "submit_time"]

_SOURCE_RANK: Mapping[str, int] = {
    "slurm-hook": 0, "slurm-squeue": 1, "slurm-sacct": 2, "slurm-jobcomp": 3,
}

# Lifecycle position of event names, to order events stated at the same instant.
_PHASE_ORDER: tuple[str, ...] = (
    "submit", "jobspec-update", "dependency-add", "dependency-remove", "set-flags",
    "validate", "invalidate", "depend", "flux-restart", "urgency", "priority", "eligible",
    "reason",
    "resource-update", "alloc", "prolog-start", "prolog-finish", "start", "memo",
    "preempt", "exception", "finish", "release", "epilog-start", "epilog-finish", "free",
    "end", "requeue", "clean",
)
_PHASE_RANK: Mapping[str, int] = {name: i for i, name in enumerate(_PHASE_ORDER)}
_PHASE_UNKNOWN = _PHASE_RANK["memo"]

# Slurm results that a requeue also produces (the run's record looks final).
_REQUEUE_RESULTS = frozenset({"node_fail", "preempted"})


def event_order(ev: JobEvent) -> tuple[Any, ...]:
    """The total order in which the fold applies a job's events."""
    return (ev.timestamp, ev.seq is None, ev.seq or 0,
            _PHASE_RANK.get(ev.event, _PHASE_UNKNOWN), _SOURCE_RANK.get(ev.source, 0),
            ev.event_id)


def _merge_maps(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """Key-wise union; where both have a key, the larger canonical value (commutative)."""
    out = dict(a)
    for k, v in b.items():
        if k not in out or canonical(v) > canonical(out[k]):
            out[k] = v
    return out


def merge_variants(a: JobEvent, b: JobEvent) -> JobEvent:
    """One event from two copies with the same id; the same result in either order."""
    seqs = [s for s in (a.seq, b.seq) if s is not None]
    return replace(
        a,
        event=min(a.event, b.event),
        timestamp=min(a.timestamp, b.timestamp),
        source=min(a.source, b.source),
        seq=min(seqs) if seqs else None,
        context=_merge_maps(a.context, b.context),
        facts=_merge_maps(a.facts, b.facts),
        job_id_f58=a.job_id_f58 or b.job_id_f58,
    )


def submit_time(ev: JobEvent) -> float | None:
    """The submit time an event states (a ``t_submit`` fact, or a ``submit``'s time)."""
    t = ev.facts.get("t_submit")
    if isinstance(t, int | float):
        return float(t)
    return ev.timestamp if ev.event == "submit" else None


def is_final(ev: JobEvent) -> bool:
    """A completion record: an ``end`` that states how the job ended."""
    return ev.event == "end" and ev.facts.get("result") in RESULTS


def split_incarnations(ordered: list[JobEvent]) -> list[list[JobEvent]]:
    """Cut the events of one Slurm job id into incarnations (:mod:`pipeline.fold`,
    "Identity")."""
    restarts: dict[float, int | None] = {}
    for ev in ordered:
        s = submit_time(ev)
        if s is None:
            continue
        rc = ev.facts.get("restart_count")
        rc = rc if isinstance(rc, int) else None
        known = restarts.get(s)
        restarts[s] = rc if known is None else (known if rc is None else max(known, rc))
    if len(restarts) < 2:
        return [ordered]
    requeued_at = [ev.timestamp for ev in ordered if ev.event == "requeue" or (
        is_final(ev) and ev.facts["result"] in _REQUEUE_RESULTS)]
    times = sorted(restarts)
    starts = [times[0]]
    for prev, s in zip(times, times[1:], strict=False):
        rc, prev_rc = restarts[s], restarts[prev]
        requeue = any(prev <= r <= s for r in requeued_at) or (
            rc is not None and rc > (prev_rc or 0))
        if not requeue:
            starts.append(s)
    return assign(ordered, starts)


def assign(ordered: list[JobEvent], starts: list[float]) -> list[list[JobEvent]]:
    """Events grouped by the start (submit time) they belong to, keeping their order: an
    incarnation's or a run's, as the ``starts`` are."""
    groups: list[list[JobEvent]] = [[] for _ in starts]
    for ev in ordered:
        s = submit_time(ev)
        idx = bisect_right(starts, ev.timestamp if s is None else s) - 1
        groups[max(idx, 0)].append(ev)
    return groups
