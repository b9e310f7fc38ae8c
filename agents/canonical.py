"""Raw records -> canonical events; why a bad record goes to the DLQ.

Stateless. A bounded LRU of recently seen events drops most duplicates (journal
backlogs after an edge reconnect, repeated polls) before they cost a fold and an output;
the per-job state of the jobs stage is what makes dropping them *correct*, so losing this
LRU in a restart costs only traffic. It remembers an event by its whole encoding, not its
``event_id`` alone: two copies of one id may differ (a journal backlog gives ``seq``, the
live journal does not) and the fold merges them, so only an exact copy may go.

Every event is cut to ``worker.max_event_bytes`` (:func:`pipeline.codecs.wire.fit_event`); a
record with an event that cannot fit goes to the DLQ whole, like any bad record. In a
multi-job record (squeue, sacct) that, like any refusal, is one job's: the job goes to the
DLQ on its own (:class:`pipeline.parsers.normalize.RejectedPart`, :func:`part_headers`) and its
neighbours go on.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Any

from pipeline.codecs.wire import Wire, fit_event
from pipeline.core.model import JobEvent
from pipeline.kafka import dlq
from pipeline.parsers.normalize import RejectedPart, normalize_parts
from pipeline.runtime.errors import ParseError, Refusal, ServiceError

__all__ = ["RecentIds", "Rejected", "RejectedPart", "canonical_events", "dlq_headers",
           "part_headers"]


class RecentIds:
    """A bounded set of recently seen ids, oldest forgotten first."""

    def __init__(self, capacity: int = 200_000) -> None:
        self.capacity = capacity
        self._ids: OrderedDict[bytes, None] = OrderedDict()

    def seen(self, data: bytes) -> bool:
        """True if ``data`` (an encoded event) was seen recently; remembers it either way."""
        digest = hashlib.blake2b(data, digest_size=16).digest()
        if digest in self._ids:
            self._ids.move_to_end(digest)
            return True
        self._ids[digest] = None
        if len(self._ids) > self.capacity:
            self._ids.popitem(last=False)
        return False


class Rejected(Refusal):
    """A raw record that gives no events: why, for its DLQ record."""

    @property
    def error(self) -> str:
        """The message, by the name the jobs stage logs it."""
        return self.message


def canonical_events(wire: Wire, value: bytes, max_bytes: int
                     ) -> tuple[list[tuple[JobEvent, bytes]], list[RejectedPart]]:
    """A raw record's canonical events, each cut to ``max_bytes``, with its encoding; and
    the jobs of a multi-job record that are refused on their own.

    :raises Rejected: the record is bad (or the parser failed on it: a parser bug must not
        stop the stream nor lose the record).
    :raises ServiceError: not the record's fault (a registry away): crash, retry on restart.
    """
    try:
        return normalize_parts(wire.decode_raw(value), lambda ev: fit_event(ev, max_bytes))
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
