"""What the stream admits of a parsed record, beyond the parsers' own checks (pure).

The parsers refuse what cannot be read. Some records read fine and still must not go
downstream as they are; :func:`admit` refuses those, whole, with a ``ParseError`` (the
normalize stage sends the raw record to the DLQ with the reason, and a replay after a fix
reprocesses it). It depends only on the record, so a replay decides the same way.

Refused:

* ``future-timestamp`` -- an event dated more than :data:`FUTURE_TOLERANCE_S` (one day)
  after the record's ``received_at`` (when the edge received it). Events report what
  happened, so such a time is a broken clock or a corrupt record; folded, it would sort
  after every real event ("later wins") and overrule them, and open an events index for
  that far month. One day is far beyond any clock skew between a scheduler and its edge.
  Exempt: Slurm's ``eligible``, which for a pending job states when it *will* become
  eligible (``sbatch --begin``). Records without a ``received_at`` (0) are not checked
  by it. Whatever the record says, an event dated, or stating a time (:data:`TIME_FACTS`),
  after :data:`MAX_EPOCH_S` is refused too: the job document holds times as epoch
  milliseconds in a 64-bit long, and a state that cannot be written would hold back its
  partition.
* ``bad-time`` -- a record whose ``received_at`` is no time: NaN, an infinity, negative,
  or after :data:`MAX_EPOCH_S` (:func:`check_received_at`). The future-time check above
  measures from it, and such a value would switch that check off (NaN compares false with
  every time; 1e300 is after every time) and let a job dated 2100 through. 0 keeps
  meaning "not known": an edge that cannot tell when it received a record says so.
* ``too-deep`` -- an event ``context`` nested deeper than :data:`MAX_CONTEXT_DEPTH`:
  Elasticsearch indexes ``context`` as ``flattened``, which refuses more than 20 levels;
  refused here, the whole record keeps its place in the DLQ instead of its event being
  dropped by the sink after the job's state already counted it.

Admitted on purpose (valid data, not errors): event names we do not know (Flux eventlogs
are extensible: they go to the events index and leave the job's derived fields alone),
events of jobs never seen before (normal after the raw topic's retention, or when an edge
starts after a job's submit: the job document holds what those events tell), times far
in the past (backfills), and huge records (the worker cuts an event's jobspec, R or
record to ``worker.max_event_bytes``, :func:`pipeline.codecs.wire.fit_event`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pipeline.core.model import JobEvent, RawRecord
from pipeline.core.nodes import NodeEvent
from pipeline.runtime.errors import ParseError

__all__ = ["FUTURE_TOLERANCE_S", "MAX_CONTEXT_DEPTH", "MAX_EPOCH_S", "TIME_FACTS", "admit",
           "check_received_at"]

FUTURE_TOLERANCE_S = 86400.0
#: No time a scheduler can mean is later (year 5138), whatever the record's receive time
MAX_EPOCH_S = 1e11
#: facts that state a moment (epoch seconds) of the job
TIME_FACTS = ("t_submit", "t_eligible", "t_start", "t_end", "expiration")
#: Elasticsearch's flattened fields accept 20 levels; the context object is one of them
MAX_CONTEXT_DEPTH = 16

#: events that may state a moment still to come
_PLANNED = frozenset({("slurm", "eligible")})


def _shown(t: float) -> str:
    """A time for a message: ``:.0f`` of an int past a float's range raises OverflowError."""
    if isinstance(t, int) and t.bit_length() > 128:
        return f"a {t.bit_length()}-bit integer"
    return f"{t:.0f}"


def check_received_at(raw: RawRecord) -> None:
    """Raise ParseError ``bad-time`` if ``raw.received_at`` is neither 0 (not known) nor an
    epoch time: it is checked before the record is parsed, since parsers use it too (a
    hook environment without its own time takes it)."""
    t = raw.received_at
    # compared, not math.isfinite: NaN fails both comparisons, and an int may be beyond
    # a float's range
    if isinstance(t, bool) or not isinstance(t, int | float) or not 0 <= t <= MAX_EPOCH_S:
        shown = _shown(t) if isinstance(t, int) and not isinstance(t, bool) else repr(t)[:40]
        raise ParseError("bad-time", f"received_at {shown} is not an epoch time (0 means not "
                         f"known; at most {MAX_EPOCH_S:.0f}, the year 5138)")


def _subject(ev: JobEvent | NodeEvent) -> str:
    return f"job {ev.job_id}" if isinstance(ev, JobEvent) else f"node {ev.key}"


def admit(raw: RawRecord, events: Sequence[JobEvent | NodeEvent]) -> None:
    """Raise ParseError if the stream must not take ``events`` (parsed from ``raw``; a node
    format's are node events, which state no facts, judged by the same rules)."""
    limit = raw.received_at + FUTURE_TOLERANCE_S if raw.received_at > 0 else None
    for ev in events:
        if limit is not None and ev.timestamp > limit \
                and (ev.scheduler, ev.event) not in _PLANNED:
            raise ParseError("future-timestamp", f"event {ev.event} of {_subject(ev)} is "
                             f"dated {ev.timestamp:.0f}, {ev.timestamp - raw.received_at:.0f} s "
                             f"after the record was received ({raw.received_at:.0f}); more "
                             f"than {FUTURE_TOLERANCE_S:.0f} s ahead is a broken clock")
        if ev.timestamp > MAX_EPOCH_S:
            raise ParseError("future-timestamp", f"event {ev.event} of {_subject(ev)} is "
                             f"dated {ev.timestamp:.0f}, after {MAX_EPOCH_S:.0f} (the year "
                             "5138): not a time")
        facts = ev.facts if isinstance(ev, JobEvent) else {}
        for name in TIME_FACTS:
            t = facts.get(name)
            if t is not None and t > MAX_EPOCH_S:
                raise ParseError("future-timestamp", f"event {ev.event} of job {ev.job_id} "
                                 f"states {name} {_shown(t)}, after {MAX_EPOCH_S:.0f} (the "
                                 "year 5138): not a time")
        if ev.context and _depth(ev.context, MAX_CONTEXT_DEPTH + 1) > MAX_CONTEXT_DEPTH:
            raise ParseError("too-deep", f"event {ev.event} of {_subject(ev)}: context "
                             f"nested deeper than {MAX_CONTEXT_DEPTH} levels")


def _depth(value: Any, stop: int) -> int:
    """Nesting depth of a JSON value (a scalar is 0), counted no further than ``stop``."""
    if stop <= 0:
        return 0
    if isinstance(value, Mapping):
        children = value.values()
    elif isinstance(value, list):
        children = value
    else:
        return 0
    deepest = 0
    for child in children:
        if isinstance(child, Mapping | list):
            deepest = max(deepest, _depth(child, stop - 1))
            if deepest >= stop - 1:
                break
    return 1 + deepest
