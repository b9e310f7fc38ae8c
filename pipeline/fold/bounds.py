"""The bounds of a job's state: which events it keeps of each window, and how much of each.

A job's state is one Kafka record, and a job's owner can post events without end, so the
state keeps at most :data:`KEEP_PER_WINDOW` events of each window (the first and the
latest, in fold order) and of each kept event only what the fold reads, cut to a size,
and of its user annotations at most ``USER_ANNOTATION_*`` (:mod:`pipeline.fold`,
"Bounds"). :class:`Window` is the fold order of a full window's kept events, so a new
event finds the one to drop without sorting them all again.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.core.jsontext import canonical
from pipeline.core.model import CANONICAL_EVENTS, JobEvent
from pipeline.fold.order import event_order

__all__ = ["FOLD_CONTEXT", "KEEP_PER_WINDOW", "STATE_FACT_CHARS", "STATE_TEXT_CHARS",
           "USER_ANNOTATION_BYTES", "USER_ANNOTATION_KEYS", "USER_ANNOTATION_KEY_BYTES",
           "USER_ANNOTATION_VALUE_BYTES", "StateTooLarge", "Window", "state_parts",
           "window_of"]

#: Events a job's state keeps of one window (:mod:`pipeline.fold`, "Bounds"): a real job
#: has a handful of each name, requeued ones one per run.
KEEP_PER_WINDOW = 100
#: The context keys the fold reads (its handlers): all a job's state keeps of a context.
FOLD_CONTEXT: frozenset[str] = frozenset(
    {"urgency", "priority", "description", "state_reason", "type", "severity", "note",
     "status"})
#: Free text of a context (an exception's type and note) kept in a job's state, at most.
STATE_TEXT_CHARS = 1024
#: Text facts kept in a job's state, at most: no real name, account or path is longer
#: (PATH_MAX is 4096), and the events index keeps them whole.
STATE_FACT_CHARS = 4096

#: A job's user annotations (its memos, :mod:`pipeline.fold.annotations`) kept, at most:
#: paths (a key, or a key within an object; deleted ones included), the smallest ones;
#: the bytes of a path's dotted name; the bytes of a value's text. So they are at most
#: :data:`USER_ANNOTATION_BYTES` in a document; what is not kept is counted there.
USER_ANNOTATION_KEYS = 64
USER_ANNOTATION_KEY_BYTES = 128
USER_ANNOTATION_VALUE_BYTES = 512
USER_ANNOTATION_BYTES = USER_ANNOTATION_KEYS * (USER_ANNOTATION_KEY_BYTES
                                                + USER_ANNOTATION_VALUE_BYTES)


class StateTooLarge(ValueError):
    """A job's state does not fit its byte budget even with one event per window."""


def window_of(ev: JobEvent) -> str:
    """The window of an event in its job's state (:mod:`pipeline.fold`, "Bounds")."""
    if ev.event == "exception":
        severity = ev.context.get("severity")
        return f"exception/{severity if isinstance(severity, int) else 0}"
    # Flux eventlogs are extensible: names we do not know share one window, so a record
    # naming thousands of them cannot make thousands of windows
    return ev.event if ev.event in CANONICAL_EVENTS else "other"


def _state_text(value: Any) -> Any:
    """A context value as a job's state keeps it: numbers as they are, text cut to
    :data:`STATE_TEXT_CHARS`, anything else as its JSON text, cut."""
    if value is None or isinstance(value, bool | int | float):
        return value
    text = value if isinstance(value, str) else canonical(value)
    return text if len(text) <= STATE_TEXT_CHARS else text[:STATE_TEXT_CHARS]


def state_parts(context: Mapping[str, Any], facts: Mapping[str, Any]
                ) -> tuple[dict[str, Any], dict[str, Any]]:
    """An event's context and facts as its job's state keeps them (new dicts): the context
    keys the fold reads, bounded, and text facts cut to :data:`STATE_FACT_CHARS`. Plain
    loops: this runs for every event folded."""
    kept: dict[str, Any] = {}
    for k, v in context.items():
        if k in FOLD_CONTEXT:
            kind = type(v)
            kept[k] = v if kind is int or kind is float or v is None or (
                kind is str and len(v) <= STATE_TEXT_CHARS) else _state_text(v)
    desc = context.get("description")
    if isinstance(desc, str) and len(desc) > STATE_TEXT_CHARS:
        # compared, never shown: two long descriptions must stay two
        kept["description"] = "blake2b:" + hashlib.blake2b(
            desc.encode(errors="surrogatepass"), digest_size=16).hexdigest()
    out = dict(facts)
    for k, v in facts.items():
        if type(v) is str and len(v) > STATE_FACT_CHARS:
            out[k] = v[:STATE_FACT_CHARS]
    return kept, out


@dataclass(slots=True)
class Window:
    """The order of a full window's kept events: its first, and a min-heap of the rest
    (the latest), by fold order."""

    first: tuple[tuple[Any, ...], str]
    rest: list[tuple[tuple[Any, ...], str]]

    @classmethod
    def of(cls, name: str, events: Iterable[JobEvent]) -> Window:
        entries = sorted((event_order(ev), ev.event_id) for ev in events
                         if window_of(ev) == name)
        window = cls(entries[0], entries[1:])
        heapq.heapify(window.rest)
        return window

    def push(self, ev: JobEvent) -> None:
        entry = (event_order(ev), ev.event_id)
        if entry < self.first:
            entry, self.first = self.first, entry
        heapq.heappush(self.rest, entry)

    def admit(self, ev: JobEvent, keep: int) -> str:
        """Take ``ev`` into a full window; the id of the event it drops (maybe its own)."""
        entry = (event_order(ev), ev.event_id)
        if entry < self.first:
            entry, self.first = self.first, entry
        if keep <= 1:
            return entry[1]
        if entry < self.rest[0]:
            return entry[1]
        return heapq.heapreplace(self.rest, entry)[1]

    def trim(self, keep: int) -> list[str]:
        """Drop the window's events beyond ``keep``, earliest of the rest first."""
        out = []
        while self.rest and len(self.rest) + 1 > keep:
            out.append(heapq.heappop(self.rest)[1])
        return out
