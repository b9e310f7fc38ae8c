"""A node's state as the worker keeps it: its newest events and the fold of the older (pure).

A node's events have no end (a Slurm poll of a changed cluster is a new event for every
node), and its state is one Kafka record (the worker table's changelog), so it cannot hold
them all. :class:`NodeFold` holds the node's newest :data:`KEEP_NODE_EVENTS` events in
fold order (:func:`pipeline.fold.nodes.event_order`), deduplicated by ``event_id`` as
:func:`~pipeline.fold.nodes.fold_nodes` does, and a :class:`~pipeline.fold.nodes.NodeFolder`
of the events pushed out of that window: an event leaves the window, the oldest first,
when a newer one comes in, and is folded into it then, once. The window only ever gives
the folder events that sort after every event it folded, so the folder plus the window,
folded in order, is the fold of every event: the document equals ``fold_nodes`` of all of
them, whatever their order and copies, as long as no event comes later than
``KEEP_NODE_EVENTS`` newer events of its node (``tests/property/test_node_fold_props.py``).

One that does can no longer take its place: it is not folded, and counts in
``events_dropped`` and in ``revision`` (so that the document saying so wins the sink's
external version check). A copy of an event that left the window (or was dropped) is known
by its id for the next ``KEEP_NODE_EVENTS`` events that leave it, and changes nothing,
wherever it sorts; a copy that comes later still counts as a new event (dropped, or
folded if it sorts after the window's oldest: two copies of one id then, which only
sources that give differing copies of an id can cause). So the counts are exact within
those bounds and an upper bound beyond. A copy of a windowed event that
:func:`~pipeline.fold.nodes.preferred` would pick but that sorts before the folder's last
event is taken as a plain copy (the fold of all events would pick it).

The table value is :meth:`NodeFold.to_json`, read back by :meth:`NodeFold.from_dict`;
:meth:`NodeFold.fit` refuses one over the worker's state budget (:class:`StateTooLarge`,
as a job's).

May import: ``pipeline.core``, ``pipeline.runtime`` and the standard library.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterable, Mapping
from typing import Any

from pipeline.core.jsontext import dumps
from pipeline.core.nodes import NodeEvent
from pipeline.fold.bounds import StateTooLarge
from pipeline.fold.nodes import NodeFolder, event_order, preferred

__all__ = ["KEEP_NODE_EVENTS", "NodeFold"]

#: a node's events its state keeps whole, the newest in fold order (module docstring)
KEEP_NODE_EVENTS = 256

_Order = tuple[float, int, str]


class NodeFold:
    """One node's events folded incrementally, bounded (module docstring)."""

    __slots__ = ("_frontier", "_heap", "_live", "_live_last", "_out", "_summary", "_window",
                 "dropped", "keep", "remember")

    def __init__(self, keep: int = KEEP_NODE_EVENTS, remember: int = KEEP_NODE_EVENTS) -> None:
        #: events kept whole; ids of events that left them remembered
        self.keep, self.remember = keep, remember
        self._window: dict[str, NodeEvent] = {}  # id -> event, each after the frontier
        self._heap: list[tuple[_Order, str]] = []  # the window's orders (stale ones skipped)
        self._summary: NodeFolder | None = None  # the events that left the window
        self._frontier: _Order | None = None  # the order of the last one of them
        self._out: dict[str, None] = {}  # ids that left the window or were dropped, oldest first
        self.dropped = 0
        # the folder of every event so far, while events come in order (not saved)
        self._live: NodeFolder | None = None
        self._live_last: _Order | None = None

    @property
    def revision(self) -> int:
        """Distinct events seen: folded, windowed and dropped."""
        folded = self._summary.count if self._summary is not None else 0
        return folded + len(self._window) + self.dropped

    def add(self, ev: NodeEvent) -> bool:
        """Take one event of the node; whether the node's document may have changed."""
        order = event_order(ev)
        frontier = self._frontier
        old = self._window.get(ev.event_id)
        if old is not None:
            if not preferred(ev, old) or (frontier is not None and order <= frontier):
                return False
            self._window[ev.event_id] = ev
            heapq.heappush(self._heap, (order, ev.event_id))
            self._live = None
            return True
        if ev.event_id in self._out:
            return False  # a copy of one that left the window, in whatever order it sorts
        if frontier is not None and order <= frontier:
            self.dropped += 1
            self._remember_out(ev.event_id)
            return True
        self._window[ev.event_id] = ev
        heapq.heappush(self._heap, (order, ev.event_id))
        live = self._live
        if live is not None and self._live_last is not None and order > self._live_last:
            live.apply(ev)
            self._live_last = order
        else:
            self._live = None
        while len(self._window) > self.keep:
            self._push_out()
        return True

    def _push_out(self) -> None:
        """Fold the window's oldest event into the summary."""
        while True:
            order, event_id = heapq.heappop(self._heap)
            ev = self._window.get(event_id)
            if ev is not None and event_order(ev) == order:
                break  # else: the order of a copy since replaced
        del self._window[event_id]
        if self._summary is None:
            self._summary = NodeFolder()
        self._summary.apply(ev)
        self._frontier = order
        self._remember_out(event_id)

    def _remember_out(self, event_id: str) -> None:
        self._out[event_id] = None
        if len(self._out) > self.remember:
            del self._out[next(iter(self._out))]

    def events(self) -> list[NodeEvent]:
        """The events the state keeps whole, in fold order."""
        return sorted(self._window.values(), key=event_order)

    def document(self) -> dict[str, Any] | None:
        """The node's document (None: no event yet)."""
        live = self._live
        if live is None:
            live = self._summary.copy() if self._summary is not None else NodeFolder()
            events = self.events()
            for ev in events:
                live.apply(ev)
            self._live = live
            self._live_last = event_order(events[-1]) if events else self._frontier
        if live.count == 0:
            return None
        return live.document(revision=live.count + self.dropped, events_dropped=self.dropped)

    # -- the table value ----------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "events": [ev.to_dict() for ev in self.events()],
            "summary": None if self._summary is None else self._summary.to_dict(),
            "frontier": None if self._frontier is None else list(self._frontier),
            "out": list(self._out), "dropped": self.dropped,
        }

    def to_json(self) -> bytes:
        return dumps(self.to_dict())

    def fit(self, max_bytes: int) -> bytes:
        """The table value, at most ``max_bytes`` long; :class:`StateTooLarge` if not."""
        value = self.to_json()
        if len(value) > max_bytes:
            raise StateTooLarge(f"the node's state is {len(value)} bytes, over the "
                                f"{max_bytes} of worker.max_state_bytes")
        return value

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], keep: int = KEEP_NODE_EVENTS,
                  remember: int = KEEP_NODE_EVENTS) -> NodeFold:
        fold = cls(keep, remember)
        if d["summary"] is not None:
            fold._summary = NodeFolder.from_dict(d["summary"])
        frontier = d["frontier"]
        fold._frontier = None if frontier is None else (float(frontier[0]), int(frontier[1]),
                                                        str(frontier[2]))
        fold._out = dict.fromkeys(d["out"])
        fold.dropped = int(d["dropped"])
        for item in d["events"]:
            ev = NodeEvent.from_dict(item)
            fold._window[ev.event_id] = ev
        fold._heap = [(event_order(ev), ev.event_id) for ev in fold._window.values()]
        heapq.heapify(fold._heap)
        return fold

    @classmethod
    def from_json(cls, value: bytes | str) -> NodeFold:
        return cls.from_dict(json.loads(value))

    @classmethod
    def of(cls, events: Iterable[NodeEvent], keep: int = KEEP_NODE_EVENTS,
           remember: int = KEEP_NODE_EVENTS) -> NodeFold:
        """The fold of ``events``, taken in the order given."""
        fold = cls(keep, remember)
        for ev in events:
            fold.add(ev)
        return fold
