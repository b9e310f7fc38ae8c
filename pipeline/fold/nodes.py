"""The node fold: canonical node events -> one node document per (cluster, node) (pure).

``fold_nodes(events)`` gives the documents of the ``NodeState`` schema (``schemas/README.md``,
"Node state" defines every field). Like the job fold, its output depends neither on the order
nor on copies of its input:

1. events are deduplicated by ``event_id``; two copies of one id that differ (they should
   not) keep the earliest, ties broken by their canonical JSON;
2. a node's events are sorted by (``timestamp``, ``restart``/``truncate`` before
   ``resource-define`` before the others, ``event_id``);
3. they are applied one by one to the node's state, and after each the document's view of
   it is taken; a change of ``state`` ends one interval and starts the next.

One small vocabulary for both schedulers (:data:`STATES`), the scheduler's own words kept in
``scheduler_state``:

================  ===========================================  ================================
state             Flux (``flux resource status``)              Slurm (its ``state`` list)
================  ===========================================  ================================
``up``            online, not drained, not torpid (``avail``)  IDLE, ALLOCATED or MIXED, no
                                                               flag below
``unresponsive``  ``torpid`` (not heard from lately)           NOT_RESPONDING (``idle*``)
``draining``      drained and running a job                    DRAIN or FAIL, and ALLOCATED,
                                                               MIXED or COMPLETING
``drained``       drained, no job                              DRAIN or FAIL otherwise
``down``          ``offline``                                  DOWN or ERROR
``off``           --                                           FUTURE, POWERED_DOWN, POWERING_UP
``unknown``       no ``restart`` or ``online`` seen yet        UNKNOWN, no base state we know
================  ===========================================  ================================

A drain outranks the rest, as both schedulers show it (Flux's ``drained*`` is drained and
offline; Slurm's DOWN+DRAIN shows as drained): ``responding`` says whether the node is
reachable besides. Flux's resource events do not say whether a node runs a job (``flux
resource status`` asks the scheduler), so ``draining`` needs the jobs' ``alloc`` and
``free`` node events (:func:`pipeline.parsers.flux_resource.allocation_events`); without
any, a drained Flux node is ``drained`` and ``allocated`` is null. A Flux drain follows
RFC 44's ``overwrite``: on a drained node 0 changes nothing, 1 the reason, 2 the reason and
its time. A host with several ranks (test set-ups) shows its worst rank in the order of the
table, draining first.

When a state began. Flux events state their own time. A Slurm poll states what holds now
(its event's time is the poll's, :mod:`pipeline.parsers.slurm_nodes`): a state begins at
the first poll that saw it, and later polls that see it again do not move ``since`` (polls
of an unchanged cluster are copies of one event and change nothing; others are new events,
which move ``updated_at`` and ``revision``). Except where the poll brings a new reason whose
``reason_changed_at`` is earlier: slurmctld stamps a reason when it sets it, as it drains
or downs the node, so the state begins then (but never before the poll that last saw the
node otherwise).

``since`` is when the current ``state`` began; ``state_s`` the seconds spent in each state,
the current one up to ``updated_at``, the time of the newest event (never the wall clock,
so a fold is reproducible; add ``now - updated_at`` for the current state's time so far).
``revision`` is the number of distinct events folded: it only grows as events arrive, the
same for any order, so the sink's external version check holds, as the job fold's does.
``events_dropped`` is always 0 here, where every event is at hand: the worker's bounded
fold (:mod:`pipeline.fold.node_state`) counts there the events it could not fold in order.
:class:`NodeFolder` is step 3 on its own, which that fold saves and carries on.

May import: ``pipeline.core``, ``pipeline.runtime`` and the standard library.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from pipeline.core.nodes import SLURM_BASE_STATES, NodeEvent, node_key

__all__ = ["DOC_FIELDS", "EVENT_FIELDS", "STATES", "NodeFolder", "event_document",
           "event_episode", "event_order", "event_state", "fold_nodes", "node_doc_id", "preferred",
           "slurm_state"]

#: the node states, in the order a host of several ranks shows the worst of them
STATES: tuple[str, ...] = ("draining", "drained", "down", "off", "unresponsive", "up",
                           "unknown")
DOC_FIELDS: tuple[str, ...] = (
    "cluster", "scheduler", "node", "state", "scheduler_state", "drained", "responding",
    "allocated", "reason", "reason_by", "reason_at", "since", "state_s", "partitions",
    "events_dropped", "revision", "updated_at",
)
#: the fields of a node event's document (the ``NodeEvent`` schema's, in its order)
EVENT_FIELDS: tuple[str, ...] = (
    "cluster", "scheduler", "node", "event", "timestamp", "source", "event_id", "reason",
    "reason_by", "state", "episode", "context",
)
#: the states a drain or a down leaves a node in (:func:`event_episode`)
_OUT = {"drained": "drain", "draining": "drain", "down": "down"}
#: events sorted before others stated at the same time: a restart resets a rank first
_FIRST = {"restart": 0, "truncate": 0, "resource-define": 1}
_BUSY = frozenset({"ALLOCATED", "MIXED"})
_OFF_FLAGS = frozenset({"POWERED_DOWN", "POWERING_UP"})
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str)


def node_doc_id(doc: Mapping[str, Any]) -> str:
    """Elasticsearch id of a node document: ``cluster:node``."""
    return node_key(doc["cluster"], doc["node"])


@dataclass
class _Rank:
    """What a Flux rank's events left: reachable, heard from, drained (and why, when)."""

    online: bool | None = None
    torpid: bool = False
    drained: bool = False
    reason: str | None = None
    drained_at: float | None = None


@dataclass
class _Slurm:
    """A Slurm poll's view of the node (the last one applied)."""

    states: list[str]
    reason: str | None
    by: str | None
    reason_at: float | None
    partitions: list[str]


@dataclass
class _Node:
    ranks: dict[int, _Rank] = field(default_factory=dict)
    jobs: set[str] = field(default_factory=set)
    jobs_known: bool = False
    slurm: _Slurm | None = None
    scheduler: str = "flux"

    def rank(self, context: Mapping[str, Any]) -> _Rank:
        rank = context.get("rank")
        key = rank if isinstance(rank, int) and not isinstance(rank, bool) else -1
        return self.ranks.setdefault(key, _Rank())

    def apply(self, ev: NodeEvent) -> None:
        self.scheduler = ev.scheduler
        name, ctx = ev.event, ev.context
        if name == "state":
            self.slurm = _slurm_view(ev)
        elif name in ("alloc", "free"):
            self.jobs_known = True
            job = str(ctx.get("job_id"))
            if name == "alloc":
                self.jobs.add(job)
            else:
                self.jobs.discard(job)
        elif name in _RANK_EVENTS:
            _RANK_EVENTS[name](self.rank(ctx), ev)

    def view(self) -> dict[str, Any]:
        """The document's fields of the node's state now (all but times and counts)."""
        if self.scheduler == "slurm" and self.slurm is not None:
            return _slurm_fields(self.slurm)
        return self._flux_fields()

    def _flux_fields(self) -> dict[str, Any]:
        def state_of(r: _Rank) -> str:
            if r.drained:
                return "draining" if self.jobs else "drained"
            if r.online is False:
                return "down"
            if r.torpid:
                return "unresponsive"
            return "up" if r.online else "unknown"

        ranks = sorted(self.ranks.items()) or [(-1, _Rank())]
        states = {key: state_of(r) for key, r in ranks}
        worst = min(states.values(), key=STATES.index)
        rank = next(r for key, r in ranks if states[key] == worst)
        drained = next((r for _, r in ranks if r.drained), None)
        word = {"draining": "draining", "drained": "drained", "unresponsive": "torpid",
                "up": "avail", "down": "avail"}.get(worst)
        if word is not None and rank.online is False:
            word += "*"
        known = [r.online for _, r in ranks]
        return {
            "state": worst, "scheduler_state": word, "drained": drained is not None,
            "responding": None if None in known else all(
                r.online and not r.torpid for _, r in ranks),
            "allocated": bool(self.jobs) if self.jobs_known else None,
            "reason": drained.reason if drained else None, "reason_by": None,
            "reason_at": drained.drained_at if drained else None, "partitions": [],
        }


def _restart(r: _Rank, ev: NodeEvent) -> None:
    r.online = bool(ev.context.get("online"))
    r.torpid = False


def _online(r: _Rank, ev: NodeEvent) -> None:
    r.online, r.torpid = True, False


def _offline(r: _Rank, ev: NodeEvent) -> None:
    r.online, r.torpid = False, False


def _torpid(r: _Rank, ev: NodeEvent) -> None:
    r.torpid = True


def _lively(r: _Rank, ev: NodeEvent) -> None:
    r.torpid = False


def _drain(r: _Rank, ev: NodeEvent) -> None:
    """RFC 44 ``overwrite``: what a drain of a drained rank changes (module docstring)."""
    overwrite = ev.context.get("overwrite", 0)
    if not r.drained or overwrite == 2:
        r.drained, r.reason, r.drained_at = True, ev.reason, ev.timestamp
    elif overwrite == 1:
        r.reason = ev.reason


def _undrain(r: _Rank, ev: NodeEvent) -> None:
    r.drained, r.reason, r.drained_at = False, None, None


def _truncate(r: _Rank, ev: NodeEvent) -> None:
    """The whole state of the rank when earlier events were dropped."""
    ctx = ev.context
    r.online, r.torpid = bool(ctx.get("online")), bool(ctx.get("torpid"))
    drain = ctx.get("drain")
    if isinstance(drain, Mapping):
        r.drained, r.reason = True, drain.get("reason")
        at = drain.get("timestamp")
        r.drained_at = float(at) if isinstance(at, int | float) else ev.timestamp
    else:
        r.drained, r.reason, r.drained_at = False, None, None


def _define(r: _Rank, ev: NodeEvent) -> None:
    """``resource-define``: the rank is part of the instance; its state is unchanged."""


_RANK_EVENTS = {
    "restart": _restart, "online": _online, "offline": _offline, "torpid": _torpid,
    "lively": _lively, "drain": _drain, "undrain": _undrain, "truncate": _truncate,
    "resource-define": _define,
}


def _slurm_view(ev: NodeEvent) -> _Slurm:
    ctx = ev.context
    states = [s for s in ctx.get("state") or () if isinstance(s, str)]
    at = ctx.get("reason_changed_at")
    partitions = [p for p in ctx.get("partitions") or () if isinstance(p, str)]
    return _Slurm(states, ev.reason, ev.by,
                  float(at) if isinstance(at, int | float) and not isinstance(at, bool)
                  else None, partitions)


def slurm_state(states: Iterable[str]) -> str:
    """The node state (:data:`STATES`) of a Slurm state list (module docstring's table)."""
    words = [s.upper() for s in states]
    base = next((w for w in words if w in SLURM_BASE_STATES), None)
    flags = set(words) - {base}
    busy = base in _BUSY or "COMPLETING" in flags
    if flags & {"DRAIN", "FAIL"}:
        return "draining" if busy else "drained"
    if base in ("DOWN", "ERROR"):
        return "down"
    if "NOT_RESPONDING" in flags:
        return "unresponsive"
    if base == "FUTURE" or flags & _OFF_FLAGS:
        return "off"
    if base in ("IDLE", "ALLOCATED", "MIXED"):
        return "up"
    return "unknown"


def _slurm_fields(view: _Slurm) -> dict[str, Any]:
    state = slurm_state(view.states)
    flags = set(view.states)
    return {
        "state": state, "scheduler_state": "+".join(view.states) or None,
        "drained": bool(flags & {"DRAIN", "FAIL"}),
        "responding": None if state == "unknown" else not (
            state in ("down", "off", "unresponsive") or "NOT_RESPONDING" in flags),
        "allocated": bool(flags & _BUSY) or "COMPLETING" in flags,
        "reason": view.reason, "reason_by": view.by, "reason_at": view.reason_at,
        "partitions": list(view.partitions),
    }


def _canonical(ev: NodeEvent) -> str:
    return _ENCODER.encode(ev.to_dict())


def preferred(new: NodeEvent, old: NodeEvent) -> bool:
    """Whether ``new`` is the copy of an id kept over ``old`` (module docstring, 1.)."""
    return (new.timestamp, _canonical(new)) < (old.timestamp, _canonical(old))


def _dedup(events: Iterable[NodeEvent]) -> dict[str, dict[str, NodeEvent]]:
    """Distinct events by node key, then by id (copies that differ: the earliest)."""
    nodes: dict[str, dict[str, NodeEvent]] = {}
    for ev in events:
        seen = nodes.setdefault(ev.key, {})
        old = seen.get(ev.event_id)
        if old is None or preferred(ev, old):
            seen[ev.event_id] = ev
    return nodes


def event_order(ev: NodeEvent) -> tuple[float, int, str]:
    """The fold's order of a node's events (module docstring, 2.)."""
    return ev.timestamp, _FIRST.get(ev.event, 2), ev.event_id


def _ms(t: float | None) -> int | None:
    return None if t is None else round(t * 1000)


def event_state(ev: NodeEvent) -> str | None:
    """The node's state after ``ev`` in the fold, where ``ev`` alone decides it: a Slurm
    ``state`` event, since the fold's view of a Slurm node is its last poll's whole
    (:func:`slurm_state` of its state list), so the answer is the same whatever arrived
    before it. None for the others: what a Flux event leaves depends on the node's other
    events (its other ranks, a drain before an ``offline``, the jobs on it for
    ``draining``), which may arrive after it, and an event is written once, as it arrives.
    """
    if ev.event != "state":
        return None
    return slurm_state(s for s in ev.context.get("state") or () if isinstance(s, str))


def event_episode(ev: NodeEvent, state: str | None) -> str | None:
    """The drain or down ``ev`` states (``state``: :func:`event_state`), one name for all
    the events that state it, so that a unique count counts it once: a Flux ``drain`` or
    ``offline`` is one on its own (its id); a Slurm poll of a drained or down node is one of
    the polls of the drain (or down) slurmctld stamped at ``reason_changed_at`` (every poll
    of an unchanged drain has that stamp, a new drain a new one). None otherwise."""
    if ev.event in ("drain", "offline"):
        return ev.event_id
    kind = _OUT.get(state or "")
    if kind is None:
        return None
    at = ev.context.get("reason_changed_at")
    stamp = "-" if isinstance(at, bool) or not isinstance(at, int | float) else str(round(at))
    return f"{ev.cluster}:{ev.node}:{kind}@{stamp}"


def event_document(ev: NodeEvent) -> dict[str, Any]:
    """The ``NodeEvent`` document of ``ev`` (:data:`EVENT_FIELDS`): a function of the event
    alone, so every copy of it gives the same document; times in epoch milliseconds."""
    state = event_state(ev)
    return {
        "cluster": ev.cluster, "scheduler": ev.scheduler, "node": ev.node, "event": ev.event,
        "timestamp": round(ev.timestamp * 1000), "source": ev.source,
        "event_id": ev.event_id, "reason": ev.reason, "reason_by": ev.by, "state": state,
        "episode": event_episode(ev, state), "context": dict(ev.context),
    }


class NodeFolder:
    """One node's events applied one by one in :func:`event_order` (module docstring, 3.):
    what the document is made of, kept as it goes so that it can be saved and carried on
    (:mod:`pipeline.fold.node_state` keeps one for the events it no longer holds)."""

    __slots__ = ("at", "count", "ident", "node", "since", "state_s", "view")

    def __init__(self) -> None:
        self.node = _Node()
        self.state_s = dict.fromkeys(STATES, 0.0)
        self.view: dict[str, Any] = {}
        self.since = 0.0
        self.at: float | None = None  # the newest event's time so far
        self.count = 0
        self.ident: tuple[str, str, str] | None = None  # cluster, scheduler, node

    def apply(self, ev: NodeEvent) -> None:
        """Fold ``ev``, which sorts after every event applied so far."""
        node = self.node
        before = node.slurm
        node.apply(ev)
        t = _effective(ev, before, self.at)
        new = node.view()
        if not self.view:
            self.since = t
        elif new["state"] != self.view["state"]:
            self.state_s[self.view["state"]] += t - self.since
            self.since = t
        self.view, self.at = new, ev.timestamp
        self.count += 1
        self.ident = (ev.cluster, ev.scheduler, ev.node)

    def document(self, *, revision: int | None = None, events_dropped: int = 0
                 ) -> dict[str, Any]:
        """The node document of the events applied (at least one); ``revision``: the
        number of distinct events, if more were seen than applied."""
        assert self.at is not None and self.ident is not None, "no event applied"
        view = self.view
        state_s = dict(self.state_s)
        state_s[view["state"]] += self.at - self.since
        cluster, scheduler, name = self.ident
        doc = {
            "cluster": cluster, "scheduler": scheduler, "node": name,
            **view, "reason_at": _ms(view["reason_at"]), "since": _ms(self.since),
            "state_s": {k: round(v, 6) for k, v in state_s.items()},
            "events_dropped": events_dropped,
            "revision": self.count if revision is None else revision,
            "updated_at": _ms(self.at),
        }
        return {name: doc[name] for name in DOC_FIELDS}  # the schema's order

    def copy(self) -> NodeFolder:
        return NodeFolder.from_dict(self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of the folder (:meth:`from_dict` reads it back)."""
        node = self.node
        return {
            "ranks": [[key, asdict(r)] for key, r in sorted(node.ranks.items())],
            "jobs": sorted(node.jobs), "jobs_known": node.jobs_known,
            "slurm": None if node.slurm is None else asdict(node.slurm),
            "scheduler": node.scheduler, "state_s": dict(self.state_s),
            "view": dict(self.view), "since": self.since, "at": self.at,
            "count": self.count, "ident": None if self.ident is None else list(self.ident),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> NodeFolder:
        folder = cls()
        node = folder.node
        node.ranks = {int(key): _Rank(**r) for key, r in d["ranks"]}
        node.jobs, node.jobs_known = set(d["jobs"]), bool(d["jobs_known"])
        node.slurm = None if d["slurm"] is None else _Slurm(**d["slurm"])
        node.scheduler = d["scheduler"]
        folder.state_s = {k: float(v) for k, v in d["state_s"].items()}
        folder.view = dict(d["view"])
        folder.since, folder.at, folder.count = float(d["since"]), d["at"], int(d["count"])
        ident = d["ident"]
        folder.ident = None if ident is None else (ident[0], ident[1], ident[2])
        return folder


def _document(events: list[NodeEvent]) -> dict[str, Any]:
    folder = NodeFolder()
    for ev in sorted(events, key=event_order):
        folder.apply(ev)
    return folder.document()


def _effective(ev: NodeEvent, before: _Slurm | None, previous: float | None) -> float:
    """When what ``ev`` says began (module docstring, "When a state began"): its time, or
    for a Slurm poll bringing a new reason stamped earlier, that stamp, but not before
    ``previous``, the time of the event before it (which saw the node otherwise)."""
    at = ev.context.get("reason_changed_at") if ev.event == "state" else None
    if ev.reason is None or not isinstance(at, int | float) or isinstance(at, bool) \
            or at >= ev.timestamp:
        return ev.timestamp
    if before is not None and (before.reason, before.reason_at) == (ev.reason, at):
        return ev.timestamp  # the same reason as before: the state changed since
    return max(float(at), previous) if previous is not None else float(at)


def fold_nodes(events: Iterable[NodeEvent]) -> list[dict[str, Any]]:
    """The node documents of ``events``, one per (cluster, node), sorted by id."""
    return [_document(list(by_id.values())) for _, by_id in sorted(_dedup(events).items())]
