"""How the worker's consumer fetches: Faust builds aiokafka's consumer with
``fetch_max_wait_ms=1500`` and aiokafka's ``fetch_min_bytes=1``, and has no setting for
either.

With a minimum of one byte the broker answers a fetch as soon as one record is there, so
at live rates (hundreds of records a second) the consumer thread makes a fetch round trip
for every few records: its requests, their answers and the hand-over of each to the event
loop cost the worker about as much as folding the records, and the broker with it
(docs/benchmarks-history.md).
Asking for ``worker.fetch_min_bytes`` within ``worker.fetch_max_wait_ms`` lets the
records of that interval come in one answer; a backlog still comes as fast as the broker
sends it. The values are set on the consumer after Faust made it and before it starts,
which is when aiokafka builds its fetcher from them.

Patched, process-wide: ``AIOKafkaConsumerThread._create_worker_consumer``, wrapped; the
values are each app's own (:func:`configure`), Faust's where an app has none.
"""

from __future__ import annotations

from typing import Any

from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

__all__ = ["FAUST_CREATE_WORKER_CONSUMER", "apply", "configure"]

#: Faust's own, wrapped
FAUST_CREATE_WORKER_CONSUMER = AIOKafkaConsumerThread._create_worker_consumer


def _create_worker_consumer(self: Any, transport: Any) -> Any:
    consumer = FAUST_CREATE_WORKER_CONSUMER(self, transport)
    fetch = getattr(self.app, "jobstream_fetch", None)
    if fetch is not None:
        consumer._fetch_min_bytes, consumer._fetch_max_wait_ms = fetch
    return consumer


def configure(app: Any, min_bytes: int, max_wait_ms: int) -> None:
    """Fetch at least ``min_bytes`` or wait ``max_wait_ms`` in ``app``'s worker consumer."""
    app.jobstream_fetch = (min_bytes, max_wait_ms)


def apply() -> None:
    """Let each app's worker consumer fetch as :func:`configure` set (idempotent)."""
    AIOKafkaConsumerThread._create_worker_consumer = _create_worker_consumer  # type: ignore[method-assign]
