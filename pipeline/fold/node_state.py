"""A node's state as the worker keeps it: its newest events and the fold of the older (pure).

A node's events have no end (a Slurm poll of a changed cluster is a new event for every
node), and its state lives in Kafka records (the worker table's changelog), so it cannot
hold them all. :class:`NodeFold` holds the node's newest :data:`KEEP_NODE_EVENTS` events in
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

**Stored.** A node's state is written at the end of every batch that folded one of its
events, and its window is most of it (~66 KB for a Flux node whose jobs' ``alloc`` and
``free`` fill it): written whole each time, a thousand such nodes would put ~64 MB into
the table's changelog per batch. So it is kept in pieces that are written once
(:meth:`NodeFold.save`, read back by :meth:`NodeFold.load`):

- *segments*, numbered: each holds the copies that came into the window since the save
  before (each id's last) and the ids that left the window or were dropped since (in that
  order), its events without the cluster, scheduler and node they share;
- a *head*, under the node's key: the folder of the events that left the window, the
  frontier, the count dropped, the node, and the range of its segments.

Read back, an id's copy in the latest segment that has one is the window's unless it sorts
at or before the frontier (it left the window since, or a preferred copy replaced it
there), and the ids that left are the segments' in order, the last ``remember`` of them:
the fold read back is the fold saved. A save that would make more than
:data:`MAX_SEGMENTS` writes the window and the remembered ids in one new segment instead
and deletes the others, which bounds what a read costs; so does the first save of a state
read from a store that may hold what its changelog lacks (:class:`agents.states.NodeStates`
says when): with a save of the changes only, a worker recovering from that changelog would
find a head naming a segment it never had. :class:`StateTooLarge` (as a job's) refuses a
state over the worker's budget, head and segments together. A value of the format before
(one value, the whole window in it) is read by :meth:`NodeFold.from_dict`, and its first
save is a whole one.

May import: ``pipeline.core``, ``pipeline.runtime`` and the standard library.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.core.jsontext import dumps
from pipeline.core.nodes import NodeEvent
from pipeline.fold.bounds import StateTooLarge
from pipeline.fold.nodes import NodeFolder, event_order, preferred

__all__ = ["KEEP_NODE_EVENTS", "MAX_SEGMENTS", "NodeFold", "Saved"]

#: a node's events its state keeps whole, the newest in fold order (module docstring)
KEEP_NODE_EVENTS = 256
#: the segments a node's stored state has at most: a save that would make one more
#: writes the whole window in one instead (module docstring, "Stored")
MAX_SEGMENTS = 16
#: the stored head's ``format`` (a value without it is the single value of before)
STORED_FORMAT = 2

_Order = tuple[float, int, str]


@dataclass(frozen=True, slots=True)
class Saved:
    """What a save writes, in this order: the new segments (number, value), the head,
    then the deletion of the segments no longer named (``dead``)."""

    head: bytes
    segments: list[tuple[int, bytes]]
    dead: range


class NodeFold:
    """One node's events folded incrementally, bounded (module docstring)."""

    __slots__ = ("_base", "_entered", "_frontier", "_heap", "_ident", "_left", "_live",
                 "_live_last", "_next", "_out", "_sizes", "_summary", "_window", "dropped",
                 "keep", "remember", "stored_bytes")

    def __init__(self, keep: int = KEEP_NODE_EVENTS, remember: int = KEEP_NODE_EVENTS) -> None:
        #: events kept whole; ids of events that left them remembered
        self.keep, self.remember = keep, remember
        self._window: dict[str, NodeEvent] = {}  # id -> event, each after the frontier
        self._heap: list[tuple[_Order, str]] = []  # the window's orders (stale ones skipped)
        self._summary: NodeFolder | None = None  # the events that left the window
        self._frontier: _Order | None = None  # the order of the last one of them
        self._out: dict[str, None] = {}  # ids that left the window or were dropped, oldest first
        self.dropped = 0
        self._ident: tuple[str, str, str] | None = None  # the first event's node
        # what changed since the last save: the copies that came into the window (each
        # id's last), the ids that left it or were dropped (in that order)
        self._entered: dict[str, NodeEvent] = {}
        self._left: list[str] = []
        # the stored segments, numbered [_base, _next), and their lengths
        self._base = self._next = 0
        self._sizes: dict[int, int] = {}
        #: the stored state's length as of the last save (head and segments; read back:
        #: its segments')
        self.stored_bytes = 0
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
        if self._ident is None:
            self._ident = (ev.cluster, ev.scheduler, ev.node)
        old = self._window.get(ev.event_id)
        if old is not None:
            if not preferred(ev, old) or (frontier is not None and order <= frontier):
                return False
            self._window[ev.event_id] = self._entered[ev.event_id] = ev
            heapq.heappush(self._heap, (order, ev.event_id))
            self._live = None
            return True
        if ev.event_id in self._out:
            return False  # a copy of one that left the window, in whatever order it sorts
        if frontier is not None and order <= frontier:
            self.dropped += 1
            self._remember_out(ev.event_id)
            return True
        self._window[ev.event_id] = self._entered[ev.event_id] = ev
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
        self._left.append(event_id)
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

    # -- the table's entries ---------------------------------------------------------

    def save(self, max_bytes: int, *, whole: bool = False) -> Saved:
        """The table entries that bring the stored state up to this fold (module
        docstring, "Stored"): a segment of what changed since the last save, or the whole
        window in one when ``whole`` (the store may hold what its changelog lacks) or
        when the node has :data:`MAX_SEGMENTS`. :class:`StateTooLarge` if the state
        would be over ``max_bytes`` in all; nothing is saved then."""
        changed = bool(self._entered or self._left)
        whole = (whole or self._next == self._base  # nothing stored yet
                 or self._next - self._base + changed > MAX_SEGMENTS)
        if whole:
            segment = self._segment(self.events(), list(self._out))
            first, sizes = self._next, {self._next: len(segment)}
        elif changed:
            segment = self._segment(self._entered.values(), self._left)
            first, sizes = self._base, {**self._sizes, self._next: len(segment)}
        else:
            segment, first, sizes = None, self._base, self._sizes
        nxt = self._next + (segment is not None)
        head = dumps({
            "format": STORED_FORMAT, "ident": None if self._ident is None else list(self._ident),
            "summary": None if self._summary is None else self._summary.to_dict(),
            "frontier": None if self._frontier is None else list(self._frontier),
            "dropped": self.dropped, "segments": [first, nxt],
        })
        total = len(head) + sum(sizes.values())
        if total > max_bytes:
            raise StateTooLarge(f"the node's state is {total} bytes, over the "
                                f"{max_bytes} of worker.max_state_bytes")
        saved = Saved(head, [] if segment is None else [(self._next, segment)],
                      range(self._base, first))
        self._base, self._next, self._sizes = first, nxt, sizes
        self._entered, self._left = {}, []
        self.stored_bytes = total
        return saved

    def _segment(self, events: Iterable[NodeEvent], left: list[str]) -> bytes:
        return dumps({"events": [self._compact(ev) for ev in events], "left": left})

    def _compact(self, ev: NodeEvent) -> dict[str, Any]:
        """An event's entry in a segment: without what every event of the node shares."""
        d = ev.to_dict()
        if self._ident == (ev.cluster, ev.scheduler, ev.node):
            del d["cluster"], d["scheduler"], d["node"]
        for name in ("reason", "by", "context"):
            if not d[name]:
                del d[name]
        return d

    @staticmethod
    def segments(head: Mapping[str, Any]) -> range:
        """The numbers of the segments a stored head names (none: the format before)."""
        if head.get("format") != STORED_FORMAT:
            return range(0)
        first, nxt = head["segments"]
        return range(int(first), int(nxt))

    @classmethod
    def load(cls, head: Mapping[str, Any], segments: Mapping[int, bytes | str],
             keep: int = KEEP_NODE_EVENTS, remember: int = KEEP_NODE_EVENTS) -> NodeFold:
        """The fold a stored head and its segments (:meth:`segments`: number -> value)
        hold; a head of the single-value format before segments, :meth:`from_dict`."""
        if head.get("format") != STORED_FORMAT:
            return cls.from_dict(head, keep, remember)
        fold = cls(keep, remember)
        ident = head["ident"]
        fold._ident = None if ident is None else (ident[0], ident[1], ident[2])
        fold._restore(head)
        numbers = cls.segments(head)
        latest: dict[str, NodeEvent] = {}
        left: list[str] = []
        for n in numbers:
            value = segments[n]
            fold._sizes[n] = len(value)
            segment = json.loads(value)
            for item in segment["events"]:
                ev = fold._expand(item)
                latest[ev.event_id] = ev  # a later segment's copy replaced an earlier one
            left += segment["left"]
        # the latest copy of an id is in the window unless it left it since
        fold._hold(ev for ev in latest.values()
                   if fold._frontier is None or event_order(ev) > fold._frontier)
        fold._out = dict.fromkeys(left[-remember:] if remember else [])
        fold._base, fold._next = numbers.start, numbers.stop
        fold.stored_bytes = sum(fold._sizes.values())
        return fold

    def _restore(self, d: Mapping[str, Any]) -> None:
        """The summary, frontier and count dropped of a stored state, either format."""
        if d["summary"] is not None:
            self._summary = NodeFolder.from_dict(d["summary"])
        frontier = d["frontier"]
        self._frontier = None if frontier is None else (float(frontier[0]), int(frontier[1]),
                                                        str(frontier[2]))
        self.dropped = int(d["dropped"])

    def _hold(self, events: Iterable[NodeEvent]) -> None:
        """Make ``events`` the window."""
        self._window = {ev.event_id: ev for ev in events}
        self._heap = [(event_order(ev), ev.event_id) for ev in self._window.values()]
        heapq.heapify(self._heap)

    def _expand(self, item: Mapping[str, Any]) -> NodeEvent:
        if "cluster" not in item:
            assert self._ident is not None, "a segment's event without its node"
            cluster, scheduler, node = self._ident
            item = {**item, "cluster": cluster, "scheduler": scheduler, "node": node}
        return NodeEvent.from_dict(item)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], keep: int = KEEP_NODE_EVENTS,
                  remember: int = KEEP_NODE_EVENTS) -> NodeFold:
        """The fold of a table value of the format before segments (one value holding
        every windowed event), as an older worker wrote it."""
        fold = cls(keep, remember)
        fold._restore(d)
        fold._out = dict.fromkeys(d["out"])
        fold._hold(NodeEvent.from_dict(item) for item in d["events"])
        first = next(iter(fold._window.values()), None)
        if first is not None:
            fold._ident = (first.cluster, first.scheduler, first.node)
        return fold

    @classmethod
    def of(cls, events: Iterable[NodeEvent], keep: int = KEEP_NODE_EVENTS,
           remember: int = KEEP_NODE_EVENTS) -> NodeFold:
        """The fold of ``events``, taken in the order given."""
        fold = cls(keep, remember)
        for ev in events:
            fold.add(ev)
        return fold
