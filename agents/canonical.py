"""Raw records -> canonical events; why a bad record goes to the DLQ.

Stateless. A bounded set of recently seen events drops most duplicates (journal
backlogs after an edge reconnect, repeated polls) before they cost a fold and an output;
the per-job state of the jobs stage is what makes dropping them *correct*, so losing this
set in a restart costs only traffic. It remembers an event by its whole encoding, not its
``event_id`` alone: two copies of one id may differ (a journal backlog gives ``seq``, the
live journal does not) and the fold merges them, so only an exact copy may go.

Every event is cut to ``worker.max_event_bytes`` (:func:`pipeline.codecs.wire.fit_event`); a
record with an event that cannot fit goes to the DLQ whole, like any bad record. In a
multi-job record (squeue, sacct) that, like any refusal, is one job's: the job goes to the
DLQ on its own (:class:`pipeline.parsers.normalize.RejectedPart`, :func:`part_headers`) and its
neighbours go on.

A node format's record (:data:`pipeline.parsers.NODE_FORMATS`) gives node events
(:class:`pipeline.core.nodes.NodeEvent`), taken by the same stage. On the canonical topic a
node event travels in a wrapper, ``{"node_event": <NodeEvent.to_dict()>}``
(:func:`encode_node_event`), beside the job events' bare JSON and the control words, and
:func:`decode_item` tells the three apart. A node event has no free-form payload to drop:
one over ``worker.max_event_bytes`` refuses its record (``too-large``).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Final

from agents.digests import DIGEST_SIZE, DigestIndex
from pipeline.codecs.wire import Wire, decode_canonical, encode_canonical, fit_event
from pipeline.core.jsontext import dumps
from pipeline.core.model import JobEvent
from pipeline.core.nodes import NodeEvent
from pipeline.kafka import dlq
from pipeline.parsers.normalize import RejectedPart, normalize_parts
from pipeline.runtime.errors import ParseError, Refusal, ServiceError

__all__ = ["NODE_EVENT", "Event", "RecentIds", "Rejected", "RejectedPart", "canonical_events",
           "decode_item", "dlq_headers", "encode_item", "encode_node_event", "fit_node_event",
           "part_headers"]

#: what a raw record's events are: a job's, or (a node format's) a node's
Event = JobEvent | NodeEvent

#: the canonical topic's wrapper of a node event (module docstring)
NODE_EVENT: Final = "node_event"
_NODE_HEAD: Final = b'{"' + NODE_EVENT.encode() + b'":'


def encode_node_event(ev: NodeEvent) -> bytes:
    """A node event as the canonical topic carries it: in its wrapper."""
    return _NODE_HEAD + dumps(ev.to_dict()) + b"}"


def encode_item(ev: Event) -> bytes:
    """An event's canonical encoding, a job's or a node's."""
    return encode_node_event(ev) if isinstance(ev, NodeEvent) else encode_canonical(ev)


def decode_item(data: bytes) -> Event | str:
    """A canonical-topic value: a job event, a node event (by its wrapper's head, which
    :func:`encode_node_event` writes first) or a control word."""
    if data.startswith(_NODE_HEAD):
        return NodeEvent.from_dict(json.loads(data)[NODE_EVENT])
    return decode_canonical(data)


def fit_node_event(ev: NodeEvent, max_bytes: int) -> tuple[NodeEvent, bytes]:
    """``ev`` and its encoding, at most ``max_bytes`` long; ParseError ``too-large`` if not
    (a node event has no payload to drop, unlike a job's, :func:`fit_event`), and
    ``bad-node`` for a node key with a NUL in it: no host is named so, and the nodes
    table keeps a node's segments under its key and a NUL
    (:func:`agents.states.segment_key`), which such a key could collide with."""
    if "\x00" in ev.key:
        raise ParseError("bad-node", f"node {ev.key!r} has a NUL character in its name")
    data = encode_node_event(ev)
    if len(data) > max_bytes:
        raise ParseError("too-large", f"event {ev.event} of node {ev.key} is {len(data)} "
                                      f"bytes, over worker.max_event_bytes ({max_bytes})")
    return ev, data


def _fit(ev: Event, max_bytes: int) -> tuple[Event, bytes]:
    if isinstance(ev, NodeEvent):
        return fit_node_event(ev, max_bytes)
    return fit_event(ev, max_bytes)


class RecentIds:
    """A bounded set of recently seen ids: an id is remembered until ``capacity`` more
    ids were seen after it (seen again, it starts over).

    A ring of ``capacity`` 16-byte digests in one ``bytearray`` with their index
    (:mod:`agents.digests`): ~24 bytes an id, where an ordered dict of digests took ~230
    (43.5 MiB of a worker at its 200,000; benchmarks/2026-12-04). The ring forgets the
    id seen ``capacity`` ids ago, so an id seen again also takes a place of the ring
    (the dict moved it to its end and forgot the oldest of ``capacity`` distinct ids).
    """

    def __init__(self, capacity: int = 200_000) -> None:
        self.capacity = capacity
        self._ring = bytearray(DIGEST_SIZE * capacity)
        self._index = DigestIndex(self._digest_of)
        self._next = 0  # the ring's place of the next id, where the oldest is
        self._filled = 0  # places of the ring written since it was made

    def __len__(self) -> int:
        return len(self._index)

    def _digest_of(self, place: int) -> bytes:
        return bytes(self._ring[place * DIGEST_SIZE:(place + 1) * DIGEST_SIZE])

    def seen(self, data: bytes) -> bool:
        """True if ``data`` (an encoded event) was seen recently; remembers it either way."""
        digest = hashlib.blake2b(data, digest_size=DIGEST_SIZE).digest()
        index, place = self._index, self._next
        was = index.find(digest)
        if self._filled == self.capacity:
            oldest = self._digest_of(place)
            if was == place:  # seen again just as it was to be forgotten: it stays there
                self._next = (place + 1) % self.capacity
                return True
            if index.find(oldest) == place:  # else: seen since, it is remembered elsewhere
                index.remove(oldest)
        else:
            self._filled += 1
        self._ring[place * DIGEST_SIZE:(place + 1) * DIGEST_SIZE] = digest
        if was >= 0:
            index.move(digest, place)
        else:
            index.add(digest, place)
        self._next = (place + 1) % self.capacity
        return was >= 0


class Rejected(Refusal):
    """A raw record that gives no events: why, for its DLQ record."""

    @property
    def error(self) -> str:
        """The message, by the name the jobs stage logs it."""
        return self.message


def canonical_events(wire: Wire, value: bytes, max_bytes: int
                     ) -> tuple[list[tuple[Event, bytes]], list[RejectedPart]]:
    """A raw record's canonical events (a node format's: node events), each cut to
    ``max_bytes``, with its encoding; and the jobs (or nodes) of a multi-job record that
    are refused on their own.

    :raises Rejected: the record is bad (or the parser failed on it: a parser bug must not
        stop the stream nor lose the record).
    :raises ServiceError: not the record's fault (a registry away): crash, retry on restart.
    """
    try:
        return normalize_parts(wire.decode_raw(value), lambda ev: _fit(ev, max_bytes))
    except ParseError as exc:
        raise Rejected(exc.reason, exc.message) from exc
    except ServiceError:
        raise
    except Exception as exc:  # noqa: BLE001 - the caller logs it with its traceback
        raise Rejected("internal-error", f"{type(exc).__name__}: {exc}") from exc


def dlq_headers(message: Any, rejected: Refusal,
                stage: str = "normalize") -> list[tuple[str, bytes]]:
    """Why a record went to the DLQ (a raw message's key and value go untouched): the
    headers of :func:`pipeline.kafka.dlq.dlq_headers`, ``origin`` where ``message`` was read."""
    return dlq.dlq_headers(rejected.reason, stage, rejected.message,
                           {"origin": dlq.origin(message.topic, message.partition,
                                                 message.offset)})


def part_headers(message: Any, part: RejectedPart) -> list[tuple[str, bytes]]:
    """Why one job of a raw record went to the DLQ (its value is the job's own JSON): the
    headers of :func:`dlq_headers`, and ``part``, the job's index in the record's ``jobs``
    (with ``origin``, where the whole record is)."""
    return [*dlq_headers(message, part), *dlq.encode_headers({"part": part.index})]
