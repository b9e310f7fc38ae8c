"""``flux-resource-journal``: Flux's resource events (RFC 44) -> canonical node events.

A record is one response of the ``resource.journal`` streaming RPC, one a line, as the job
journal's are: ``{"events": [<RFC 18 entry>...], "R"?: {...}}``; the sentinel
``{"events": []}`` (backlog done) yields nothing. Every entry becomes one
:class:`~pipeline.core.nodes.NodeEvent` per node it concerns, named as Flux names it.

Which nodes. RFC 44 events name execution targets (ranks), not hosts. ``drain`` and
``undrain`` carry their own ``nodelist`` (the hosts of their ``idset``, in rank order),
and their names are used (where an old one lacks it, the map below names them).
``online``, ``offline``, ``torpid``, ``lively``, ``truncate`` and ``resource-define``
carry ranks only, which "can be mapped to hostnames using the ``nodelist`` key from the
most recent ``restart`` event" (RFC 44). A live response holds no ``restart``, so the
record states that map itself: the top-level keys ``ranks`` and ``nodelist``, which the
publisher adds from the connection's latest ``restart`` (:class:`RankMaps` does it, for the
Flux edge to run over the responses it reads). Within a record an entry uses the map of
the latest ``restart`` (or ``truncate`` carrying one) before it, else the record's own; an
entry naming ranks with no map, or a rank outside it, is refused (``unknown-ranks``): a
node must never be guessed.

R and the events disagree. The instance's R (on ``resource-define``) has a nodelist too,
and it need not agree with the events: the recorded test instance discovered R by hwloc,
so R names the real host (``vm`` four times) while the brokers, and so every event, name
the test hosts node0-3. Nodes are keyed by what the events say, never by R: a
``resource-define`` is named by the map like any rank-only event (R says which ranks it
defines), and where R names a rank otherwise, its event keeps R's name as
``context.r_host``, so the mismatch stays visible. (``flux resource status`` prints R's
names; the tests map its ranks through the events' map.) A file of responses, a recording
of one connection, is cut into records with the maps added (``split_records``).

Per node the context keeps the entry's own keys minus the instance-wide sets (``idset``,
``nodelist``, ``ranks``), plus ``rank`` and what the sets said of that rank: ``online`` on
``restart``; ``online``, ``torpid`` and ``drain`` (its ``timestamp`` and ``reason``, or
null) on ``truncate``. A ``drain``'s reason is the event's ``reason``. Flux's resource
events name no user, so ``by`` is always null. ``resource-update`` (an expiration of the
whole instance) concerns no node and yields nothing; an event name we do not know yields
an event per rank of its ``idset`` if it has one, else nothing.

``event_id`` hashes (cluster, "flux", "node", host, rank, name, timestamp): the same entry
seen in a backlog and live is one event. The job journal's ``alloc`` and ``free`` become
node events too (:func:`allocation_events`), for the fold to tell a drained node that
still runs a job (Flux's ``draining``: its resource service asks the scheduler for that)
from one that does not.

Bad input raises ``ParseError``: ``invalid-utf8``, ``invalid-json``, ``not-an-object``,
``duplicate-key``, ``missing-field``, ``bad-type``, ``bad-value`` (a drain's
``overwrite``), ``bad-timestamp``, ``bad-idset``, ``bad-hostlist``, ``bad-R``,
``unknown-ranks``; the message names the entry and field.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.core.hostlist import expand_hostlist, expand_idset
from pipeline.core.model import JobEvent, make_event_id
from pipeline.core.nodes import NodeEvent
from pipeline.parsers.flux import eventlog_entry, timestamp_of
from pipeline.parsers.slurm_common import decode_json
from pipeline.runtime.errors import ParseError

__all__ = ["MAX_ALLOCATION_HOSTS", "SOURCE", "RankMap", "RankMaps", "allocation_events",
           "allocation_hosts", "job_node_events", "parse_resource_journal"]

SOURCE = "flux-resource-journal"
#: context keys that describe the whole instance, not the node an event is about
_SET_KEYS = frozenset({"idset", "nodelist", "ranks", "online", "torpid", "drain"})
#: events that carry their own nodelist for their idset
_OWN_NODELIST = frozenset({"drain", "undrain"})
#: events of the whole instance, about no node
_INSTANCE_EVENTS = frozenset({"resource-update"})


@dataclass(frozen=True, slots=True)
class RankMap:
    """Ranks to host names: an RFC 22 idset and the RFC 29 hostlist of its ranks, in
    rank order (a ``restart``'s ``ranks`` and ``nodelist``)."""

    ranks: str
    nodelist: str

    def hosts(self, where: str) -> dict[int, str]:
        return _zip_hosts(self.ranks, self.nodelist, where)


def _idset(text: Any, where: str) -> list[int]:
    if not isinstance(text, str):
        raise ParseError("bad-type", f"{where} must be an RFC 22 idset string")
    try:
        return expand_idset(text)
    except (ValueError, RecursionError) as exc:
        raise ParseError("bad-idset", f"{where} {text[:80]!r}: {exc}") from None


def _hostlist(text: Any, where: str) -> list[str]:
    if not isinstance(text, str):
        raise ParseError("bad-type", f"{where} must be an RFC 29 hostlist string")
    try:
        return expand_hostlist(text)
    except (ValueError, RecursionError) as exc:
        raise ParseError("bad-hostlist", f"{where} {text[:80]!r}: {exc}") from None


def _zip_hosts(ranks: Any, nodelist: Any, where: str) -> dict[int, str]:
    """The hosts of ``ranks`` (ascending) read off ``nodelist``, which must name as many."""
    ids = sorted(set(_idset(ranks, f"{where}.ranks")))
    hosts = _hostlist(nodelist, f"{where}.nodelist")
    if len(hosts) != len(ids):
        raise ParseError("bad-hostlist", f"{where}: nodelist names {len(hosts)} host(s) "
                         f"for {len(ids)} rank(s)")
    return dict(zip(ids, hosts, strict=True))


def _R_hosts(R: Any) -> dict[int, str]:
    """Rank -> host as R itself says (RFC 20: R_lite's ranks in ascending order are the
    nodelist's hosts in order); {} when R has no nodelist."""
    if not isinstance(R, dict) or not isinstance(R.get("execution"), dict):
        raise ParseError("bad-R", "R must be an object with an execution object")
    execution = R["execution"]
    entries = execution.get("R_lite")
    if not isinstance(entries, list):
        raise ParseError("bad-R", "R.execution.R_lite must be a list")
    ranks: set[int] = set()
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ParseError("bad-R", f"R.execution.R_lite[{i}] must be an object")
        ranks.update(_idset(entry.get("rank"), f"R.execution.R_lite[{i}].rank"))
    nodelist = execution.get("nodelist")
    if nodelist is None:
        return {}
    if isinstance(nodelist, str):
        nodelist = [nodelist]
    if not isinstance(nodelist, list):
        raise ParseError("bad-R", "R.execution.nodelist must be a list of hostlists")
    hosts = [h for i, text in enumerate(nodelist)
             for h in _hostlist(text, f"R.execution.nodelist[{i}]")]
    if len(hosts) != len(ranks):
        raise ParseError("bad-R", f"R's nodelist names {len(hosts)} host(s) for "
                         f"{len(ranks)} rank(s)")
    return dict(zip(sorted(ranks), hosts, strict=True))


def _check_finite(value: Any, where: str) -> None:
    """JSON has no NaN or infinity, but Python reads ``1e400`` as inf: refused, so that no
    such number travels downstream (iterative: a deep value cannot exhaust the stack)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise ParseError("invalid-json", f"{where} holds a number too large for JSON")
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _require_str(context: Mapping[str, Any], key: str, where: str) -> str:
    if key not in context:
        raise ParseError("missing-field", f"{where}.context.{key} is missing")
    value = context[key]
    if not isinstance(value, str):
        raise ParseError("bad-type", f"{where}.context.{key} must be a string")
    return value


class _Reader:
    """The events of one record: the rank map in force as its entries go by."""

    def __init__(self, cluster: str, response: Mapping[str, Any]) -> None:
        self.cluster = cluster
        self.hosts: dict[int, str] | None = None
        self.R = response.get("R")
        if ("ranks" in response) != ("nodelist" in response):
            raise ParseError("missing-field", "the record's rank map needs both ranks and "
                             "nodelist")
        if "ranks" in response:
            self.hosts = _zip_hosts(response["ranks"], response["nodelist"], "record")
        self.events: list[NodeEvent] = []

    def entry(self, entry: Any, where: str) -> None:
        name, ts, context = eventlog_entry(entry, where)
        where = f"{where} ({name})"
        own = {k: v for k, v in context.items() if k not in _SET_KEYS}
        if name == "restart":
            hosts = _zip_hosts(_require_str(context, "ranks", where),
                               _require_str(context, "nodelist", where), f"{where}.context")
            online = set(_idset(_require_str(context, "online", where),
                                f"{where}.context.online"))
            self.hosts = hosts
            for rank, host in hosts.items():
                self._add(name, ts, host, rank, {**own, "online": rank in online})
        elif name == "truncate":
            self._truncate(context, own, ts, where)
        elif name in _OWN_NODELIST:
            ids = _require_str(context, "idset", where)
            if "nodelist" in context:
                hosts = _zip_hosts(ids, context["nodelist"], f"{where}.context")
            else:  # before RFC 44 required it: the map names them
                hosts = {rank: self._host(rank, where)
                         for rank in _idset(ids, f"{where}.context.idset")}
            reason = context.get("reason")
            if reason is not None and not isinstance(reason, str):
                raise ParseError("bad-type", f"{where}.context.reason must be a string")
            overwrite = context.get("overwrite", 0)
            if name == "drain" and overwrite not in (0, 1, 2):
                raise ParseError("bad-value", f"{where}.context.overwrite must be 0, 1 or 2")
            own.pop("reason", None)  # the event's own field
            for rank, host in hosts.items():
                self._add(name, ts, host, rank, own, reason=reason or None)
        elif name == "resource-define":
            self._define(own, ts, where)
        elif name in _INSTANCE_EVENTS:
            return
        elif "idset" in context or name in ("online", "offline", "torpid", "lively"):
            ranks = _idset(_require_str(context, "idset", where), f"{where}.context.idset")
            for rank in ranks:
                self._add(name, ts, self._host(rank, where), rank, own)

    def _host(self, rank: int, where: str) -> str:
        if self.hosts is None:
            raise ParseError("unknown-ranks", f"{where} names ranks only, and the record "
                             "has no rank map: neither a restart before it nor the "
                             "top-level ranks/nodelist the Flux edge adds")
        host = self.hosts.get(rank)
        if host is None:
            raise ParseError("unknown-ranks", f"{where}: rank {rank} is not in the rank map "
                             f"({len(self.hosts)} ranks)")
        return host

    def _truncate(self, context: Mapping[str, Any], own: dict[str, Any], ts: float,
                  where: str) -> None:
        """RFC 44 ``truncate``: the state of every rank when earlier events were dropped."""
        if "nodelist" in context or "ranks" in context:
            self.hosts = _zip_hosts(_require_str(context, "ranks", where),
                                    _require_str(context, "nodelist", where),
                                    f"{where}.context")
        online = set(_idset(_require_str(context, "online", where), f"{where}.context.online"))
        torpid = set(_idset(_require_str(context, "torpid", where), f"{where}.context.torpid"))
        drains = context.get("drain")
        if not isinstance(drains, dict):
            raise ParseError("missing-field" if drains is None else "bad-type",
                             f"{where}.context.drain must be an object")
        drained: dict[int, dict[str, Any]] = {}
        for ids, info in drains.items():
            if not isinstance(info, dict):
                raise ParseError("bad-type", f"{where}.context.drain[{ids[:40]!r}] must be "
                                 "an object")
            at = timestamp_of(info.get("timestamp"), f"{where}.context.drain.timestamp")
            reason = info.get("reason")
            if reason is not None and not isinstance(reason, str):
                raise ParseError("bad-type", f"{where}.context.drain.reason must be a string")
            for rank in _idset(ids, f"{where}.context.drain key"):
                drained[rank] = {"timestamp": at, "reason": reason or None}
        ranks = sorted(self.hosts) if self.hosts is not None \
            else sorted(online | torpid | set(drained))
        for rank in ranks:
            drain = drained.get(rank)
            self._add("truncate", ts, self._host(rank, where), rank,
                      {**own, "online": rank in online, "torpid": rank in torpid,
                       "drain": drain}, reason=drain["reason"] if drain else None)

    def _define(self, own: dict[str, Any], ts: float, where: str) -> None:
        """``resource-define``: one event per rank of R (or of the map), named by the
        map, R's name kept beside it where the two differ (module docstring)."""
        r_hosts = _R_hosts(self.R) if self.R is not None else {}
        ranks = sorted(set(r_hosts) | set(_R_ranks(self.R))) if self.R is not None \
            else sorted(self.hosts or {})
        if not ranks:
            raise ParseError("unknown-ranks", f"{where}: neither R nor a rank map says "
                             "which ranks it defines")
        for rank in ranks:
            r_host = r_hosts.get(rank)
            host = self._host(rank, where)
            ctx = dict(own)
            if r_host is not None and r_host != host:
                ctx["r_host"] = r_host
            self._add("resource-define", ts, host, rank, ctx)

    def _add(self, name: str, ts: float, host: str, rank: int, context: Mapping[str, Any],
             reason: str | None = None) -> None:
        self.events.append(NodeEvent(
            cluster=self.cluster, scheduler="flux", node=host, event=name, timestamp=ts,
            source=SOURCE, reason=reason, context={**context, "rank": rank},
            event_id=make_event_id(self.cluster, "flux", "node", host, rank, name, ts)))


def parse_resource_journal(payload: bytes, *, cluster: str,
                           received_at: float | None = None) -> list[NodeEvent]:
    """Node events of one ``resource.journal`` response (``flux-resource-journal``)."""
    what = "resource journal response"
    response = decode_json(payload, what=what)
    if not isinstance(response, dict):
        raise ParseError("not-an-object", f"{what} must be a JSON object")
    if "events" not in response:
        raise ParseError("missing-field", f"{what} has no events")
    entries = response["events"]
    if not isinstance(entries, list):
        raise ParseError("bad-type", f"{what}: events must be a list")
    if response.get("R") is not None and not isinstance(response["R"], dict):
        raise ParseError("bad-R", f"{what}: R must be an object")
    reader = _Reader(cluster, response)
    for i, entry in enumerate(entries):
        reader.entry(entry, f"events[{i}]")
    _check_finite(response, what)  # after the entries: a timestamp's is bad-timestamp
    return reader.events


class RankMaps:
    """Turns the responses of one journal connection, in order, into records: a response
    gets the latest ``restart``'s map as top-level ``ranks`` and ``nodelist`` unless it
    holds a restart of its own (module docstring).

    The keys are put in front of the response's own text, which stays byte for byte as
    Flux sent it. A response that cannot be read is returned as it is: the parser refuses
    it with the reason. One instance per connection: a new connection's backlog starts
    with a ``restart`` again.
    """

    def __init__(self) -> None:
        self.latest: RankMap | None = None

    @property
    def hosts(self) -> dict[int, str]:
        """Rank -> host of the latest map ({} before the first ``restart``)."""
        return self.latest.hosts("rank map") if self.latest is not None else {}

    def record(self, response: bytes) -> bytes:
        try:
            value = json.loads(response)
        except (ValueError, RecursionError):
            return response
        if not isinstance(value, dict) or not isinstance(value.get("events"), list):
            return response
        entries = [e for e in value["events"] if isinstance(e, dict)]
        out = response
        first = entries[0].get("name") if entries else None
        if (self.latest is not None and entries and first != "restart"
                and "ranks" not in value and "nodelist" not in value):
            head = json.dumps({"ranks": self.latest.ranks, "nodelist": self.latest.nodelist},
                              separators=(",", ":")).encode()
            body = response.lstrip()
            if body.startswith(b"{"):
                out = head[:-1] + b"," + body[1:]
        for entry in entries:
            context = entry.get("context")
            if entry.get("name") in ("restart", "truncate") and isinstance(context, dict) \
                    and isinstance(context.get("ranks"), str) \
                    and isinstance(context.get("nodelist"), str):
                self.latest = RankMap(context["ranks"], context["nodelist"])
        return out

    def records(self, responses: Iterable[bytes]) -> Iterator[bytes]:
        for response in responses:
            yield self.record(response)


#: a Flux job allocated more hosts than this gives no node events (docs/flux.md): each
#: host costs a node event, a node state and a node document, and a host list names up to
#: :data:`pipeline.core.hostlist.MAX_HOSTS` hosts in a few characters. Above the largest
#: Flux system's node count (El Capitan's 11,136), well below that cap.
MAX_ALLOCATION_HOSTS = 16_384


def allocation_events(events: Iterable[JobEvent],
                      hosts: Mapping[int, str] | None = None, *,
                      max_hosts: int = MAX_ALLOCATION_HOSTS) -> list[NodeEvent]:
    """``alloc`` and ``free`` node events of Flux jobs, from their job events.

    An ``alloc`` gives one ``alloc`` per node of its allocation (:func:`allocation_hosts`),
    none if it has more than ``max_hosts``; the job's ``free`` among ``events`` gives one
    ``free`` per node of that allocation (a ``free`` whose ``alloc`` is not among them
    gives nothing: its nodes are unknown here). ``event_id`` hashes (cluster, "flux",
    "node", host, name, job id, timestamp).
    """
    allocs: dict[tuple[str, str], list[str]] = {}
    frees: list[JobEvent] = []
    out: list[NodeEvent] = []
    for ev in events:
        if ev.scheduler != "flux":
            continue
        if ev.event == "alloc":
            nodes = allocation_hosts(ev, hosts)
            if nodes is None or len(nodes) > max_hosts:
                continue
            out += job_node_events(ev, "alloc", nodes)
            allocs[(ev.cluster, ev.job_id)] = nodes
        elif ev.event == "free":
            frees.append(ev)
    for ev in frees:
        out += job_node_events(ev, "free", allocs.get((ev.cluster, ev.job_id), ()))
    return out


def allocation_hosts(ev: JobEvent, hosts: Mapping[int, str] | None = None) -> list[str] | None:
    """The hosts of an ``alloc`` (once each, in rank order), None if it does not say.

    The nodes of an ``alloc`` carrying R are its ``R_lite`` ranks named by ``hosts`` (the
    resource journal's rank map, :attr:`RankMaps.hosts`), which the job's R may contradict
    as the instance's does (module docstring); a rank ``hosts`` lacks is named by R. An
    ``alloc`` without R (as a job's state keeps it, or one whose R was dropped to fit the
    events topic) has them in its ``nodelist`` fact, R's nodelist as the parser read it. A
    job is allocated a host, whichever of its ranks, so a host of several ranks is named
    once, and the same with or without R when ``hosts`` is not given.
    """
    if ev.R is None:
        nodelist = ev.facts.get("nodelist")
        if not isinstance(nodelist, list):
            return None
        return list(dict.fromkeys(h for h in nodelist if isinstance(h, str)))
    r_hosts = _R_hosts(ev.R)
    nodes: list[str] = []
    for rank in sorted(set(r_hosts) | set(_R_ranks(ev.R))):
        host = (hosts or {}).get(rank) or r_hosts.get(rank)
        if host is None:
            raise ParseError("unknown-ranks", f"job {ev.job_id}: rank {rank} of its R "
                             "has no host name")
        nodes.append(host)
    return list(dict.fromkeys(nodes))


def _R_ranks(R: Mapping[str, Any]) -> list[int]:
    return [rank for i, entry in enumerate(R["execution"]["R_lite"])
            for rank in _idset(entry.get("rank"), f"R.execution.R_lite[{i}].rank")]


def job_node_events(ev: JobEvent, name: str, hosts: Iterable[str]) -> list[NodeEvent]:
    """The node events ``name`` (``alloc`` or ``free``) of Flux job event ``ev`` on
    ``hosts``; the context holds ``job_id``."""
    return [NodeEvent(
        cluster=ev.cluster, scheduler="flux", node=host, event=name, timestamp=ev.timestamp,
        source=ev.source, context={"job_id": ev.job_id},
        event_id=make_event_id(ev.cluster, "flux", "node", host, name, ev.job_id,
                               ev.timestamp))
        for host in hosts]