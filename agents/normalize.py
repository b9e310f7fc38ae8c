"""Stage 1: raw records -> canonical events, re-keyed by job; bad records -> DLQ.

Stateless. A bounded LRU of recently seen events drops most duplicates (journal
backlogs after an edge reconnect, repeated polls) before they cost a Kafka round trip;
the per-job state of stage 2 is what makes dropping them *correct*, so losing this LRU in
a restart costs only traffic. It remembers an event by its whole encoding, not its
``event_id`` alone: two copies of one id may differ (a journal backlog gives ``seq``, the
live journal does not) and the fold merges them, so only an exact copy may go.

Every event is cut to ``worker.max_event_bytes`` (:func:`pipeline.wire.fit_event`); a
record with an event that cannot fit goes to the DLQ whole, like any bad record.
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from pipeline.errors import ParseError, ServiceError
from pipeline.metrics import DLQ_RECORDS, WORKER_DUPLICATES_DROPPED, WORKER_RECORDS_READ
from pipeline.normalize import normalize
from pipeline.wire import fit_event

if TYPE_CHECKING:
    from agents.app import Worker

__all__ = ["RecentIds", "register"]

logger = logging.getLogger(__name__)


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


def register(worker: Worker) -> None:
    recent = RecentIds()
    max_bytes = worker.cfg.worker.max_event_bytes
    read = WORKER_RECORDS_READ.labels(worker.raw.get_topic_name())

    @worker.app.agent(worker.raw, name="normalize", concurrency=1)
    async def normalize_raw(stream):  # type: ignore[no-untyped-def]
        async for event in stream.events():
            message = event.message
            read.inc()
            try:
                events = [fit_event(ev, max_bytes)
                          for ev in normalize(worker.wire.decode_raw(message.value))]
            except ParseError as exc:
                logger.warning("bad raw record %s[%d]@%d: %s", message.topic, message.partition,
                               message.offset, exc)
                await _to_dlq(worker, message, exc.reason, exc.message)
                continue
            except ServiceError:
                raise  # not the record's fault (a registry away): crash, retry on restart
            except Exception as exc:  # a parser bug must not stop the stream nor lose the record
                logger.exception("parser failure on %s[%d]@%d", message.topic, message.partition,
                                 message.offset)
                await _to_dlq(worker, message, "internal-error", f"{type(exc).__name__}: {exc}")
                continue
            for ev, data in events:
                if recent.seen(data):
                    WORKER_DUPLICATES_DROPPED.inc()
                    continue
                await worker.canonical.send(key=ev.key.encode(), value=data)


async def _to_dlq(worker: Worker, message: Any, reason: str, error: str) -> None:
    """The raw message, untouched, to the DLQ with why (headers ``reason``, ``stage``,
    ``error``, and ``source``: where it was read)."""
    await worker.dlq.send(
        key=message.key, value=message.value,
        headers=[("reason", reason.encode()), ("stage", b"normalize"),
                 ("error", error.encode()[:1000]),
                 ("source", f"{message.topic}[{message.partition}]@{message.offset}".encode())])
    DLQ_RECORDS.labels("normalize", reason).inc()
