"""A job's state as JSON (:meth:`pipeline.fold.JobFold.to_dict`, a Faust table value):
its head, one entry per kept event, and the fingerprints that tell a new copy of an
event from one already folded.

The encoding is the ``JobFold`` state every worker reads back from the table's
changelog, so it only gains keys a state without them reads as their default: ``dropped``
and ``keep`` appear only once the bounds have dropped events or narrowed the windows,
``annotations`` and ``annotations_dropped`` once a memo set a user annotation
(:mod:`pipeline.fold.annotations`), ``usage`` and ``usage_dropped`` once a node sample
came (:mod:`pipeline.fold.usage`), and a long node list is kept as runs of numbered
names (:func:`node_runs`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any

from pipeline.core.jsontext import canonical
from pipeline.core.model import JobEvent
from pipeline.fold.annotations import UserAnnotations
from pipeline.fold.bounds import KEEP_PER_WINDOW, state_parts
from pipeline.fold.usage import NodeUsage

__all__ = ["annotations_of", "event_entry", "event_of_entry", "fingerprint", "node_names",
           "node_runs", "state_head", "usage_of"]

#: A node list of more names than this is kept in a job's state as runs of numbered names.
_RUNS_FROM = 16
_NUMBERED = re.compile(r"(.*?)([0-9]{1,18})([^0-9]*)", re.DOTALL)


def fingerprint(ev: JobEvent) -> str:
    """The content of an event, hashed: a copy of an id with another one is folded too."""
    text = canonical([ev.event, repr(ev.timestamp), ev.source, ev.seq, ev.context, ev.facts])
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def node_runs(names: list[Any]) -> list[list[Any]]:
    """``["n01", "n02", "n03", "login"]`` -> ``[["n", 1, 3, 2, ""], ["login"]]``: names as
    runs of (prefix, first number, count, zero-padded width, suffix), in their order, or
    alone. Exact by construction (a run's names are formatted back and compared), with no
    hostlist syntax to escape: a 10,000-node job's list is a few runs, not 150 KB in
    every event of its state that states it."""
    runs: list[list[Any]] = []
    for name in names:
        m = _NUMBERED.fullmatch(name) if isinstance(name, str) else None
        if m is None:
            runs.append([name])
            continue
        prefix, digits, suffix = m.groups()
        number, width = int(digits), len(digits)
        if f"{number:0{width}d}" != digits:
            runs.append([name])
            continue
        last = runs[-1] if runs else None
        if (last is not None and len(last) == 5 and last[0] == prefix and last[4] == suffix
                and last[3] == width and last[1] + last[2] == number
                and len(str(number)) <= width):
            last[2] += 1
        else:
            runs.append([prefix, number, 1, width, suffix])
    return runs


def node_names(runs: list[list[Any]]) -> list[Any]:
    """The names of :func:`node_runs`' runs, in their order."""
    out: list[Any] = []
    for run in runs:
        if len(run) == 1:
            out.append(run[0])
        else:
            prefix, first, count, width, suffix = run
            out.extend(f"{prefix}{i:0{width}d}{suffix}" for i in range(first, first + count))
    return out


def state_head(cluster: str | None, scheduler: str | None, job_id: str | None,
               job_id_f58: str | None, dropped: Mapping[str, int], keep: int,
               annotations: UserAnnotations, usage: NodeUsage) -> dict[str, Any]:
    """The state's keys but its events."""
    head: dict[str, Any] = {"cluster": cluster, "scheduler": scheduler, "job_id": job_id,
                            "job_id_f58": job_id_f58}
    if dropped:
        head["dropped"] = dict(sorted(dropped.items()))
    if keep != KEEP_PER_WINDOW:
        head["keep"] = keep
    if len(annotations):
        head["annotations"] = annotations.to_state()
    if annotations.dropped:
        head["annotations_dropped"] = annotations.dropped
    if len(usage):
        head["usage"] = usage.to_state()
    if usage.dropped:
        head["usage_dropped"] = usage.dropped
    return head


def annotations_of(head: Mapping[str, Any]) -> UserAnnotations:
    """The user annotations of a state's head (none in a state written before them)."""
    return UserAnnotations.from_state(head.get("annotations") or (),
                                      int(head.get("annotations_dropped") or 0))


def usage_of(head: Mapping[str, Any]) -> NodeUsage:
    """The node samples of a state's head (none in a state written before them)."""
    return NodeUsage.from_state(head.get("usage") or (), int(head.get("usage_dropped") or 0))


def event_entry(ev: JobEvent, fps: Iterable[str]) -> dict[str, Any]:
    """A kept event as its state's entry, with the fingerprints of its copies folded."""
    facts = dict(ev.facts)
    nodelist = facts.get("nodelist")
    if isinstance(nodelist, list) and len(nodelist) > _RUNS_FROM:
        facts["nodelist"] = {"runs": node_runs(nodelist)}
    return {"event_id": ev.event_id, "event": ev.event, "timestamp": ev.timestamp,
            "source": ev.source, "seq": ev.seq, "context": dict(ev.context),
            "facts": facts, "fps": sorted(fps)}


def event_of_entry(head: Mapping[str, Any], entry: Mapping[str, Any],
                   job_id_f58: str | None) -> JobEvent:
    """The event of a state's entry, as the state keeps it."""
    # a state written before the bounds: the same rules, applied as it is read
    context, facts = state_parts(entry.get("context") or {}, entry.get("facts") or {})
    nodelist = facts.get("nodelist")
    if isinstance(nodelist, dict):
        facts["nodelist"] = node_names(nodelist["runs"])
    return JobEvent(cluster=head["cluster"], scheduler=head["scheduler"],
                    job_id=head["job_id"], event=entry["event"],
                    timestamp=float(entry["timestamp"]), source=entry["source"],
                    event_id=entry["event_id"], seq=entry.get("seq"), context=context,
                    facts=facts, job_id_f58=job_id_f58)
