"""Stage 1: raw records -> canonical events, re-keyed by job; bad records -> DLQ.

Stateless. A bounded LRU of recently seen ``event_id``s drops most duplicates (journal
backlogs after an edge reconnect, repeated polls) before they cost a Kafka round trip;
the per-job state of stage 2 is what makes dropping them *correct*, so losing this LRU in
a restart costs only traffic.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import TYPE_CHECKING

from pipeline.errors import ParseError
from pipeline.normalize import normalize
from pipeline.wire import encode_canonical

if TYPE_CHECKING:
    from agents.app import Worker

__all__ = ["RecentIds", "register"]

logger = logging.getLogger(__name__)


class RecentIds:
    """A bounded set of recently seen ids, oldest forgotten first."""

    def __init__(self, capacity: int = 200_000) -> None:
        self.capacity = capacity
        self._ids: OrderedDict[str, None] = OrderedDict()

    def seen(self, event_id: str) -> bool:
        """True if ``event_id`` was seen recently; remembers it either way."""
        if event_id in self._ids:
            self._ids.move_to_end(event_id)
            return True
        self._ids[event_id] = None
        if len(self._ids) > self.capacity:
            self._ids.popitem(last=False)
        return False


def register(worker: Worker) -> None:
    recent = RecentIds()

    @worker.app.agent(worker.raw, name="normalize", concurrency=1)
    async def normalize_raw(stream):  # type: ignore[no-untyped-def]
        async for event in stream.events():
            message = event.message
            try:
                events = normalize(worker.wire.decode_raw(message.value))
            except ParseError as exc:
                logger.warning("bad raw record %s[%d]@%d: %s", message.topic, message.partition,
                               message.offset, exc)
                await worker.dlq.send(
                    key=message.key, value=message.value,
                    headers=[("reason", exc.reason.encode()), ("stage", b"normalize"),
                             ("error", exc.message.encode()[:1000]),
                             ("source", f"{message.topic}[{message.partition}]@"
                                        f"{message.offset}".encode())])
                continue
            for ev in events:
                if recent.seen(ev.event_id):
                    continue
                await worker.canonical.send(key=ev.key.encode(), value=encode_canonical(ev))
