"""The dead-letter queue: every record a stage cannot handle goes to ``hpc.jobs.dlq``.

The DLQ record carries the original key and value bytes untouched, so that it can be
inspected and reprocessed after a fix, and headers that say why:

* ``reason`` -- a short machine word (``ParseError.reason``, an Elasticsearch error type);
* ``stage`` -- which stage gave up (``edge``, ``parse``, ``fold``, ``sink``, ...);
* ``error`` -- the message a person reads;

plus any coordinates the caller adds (``origin`` = ``topic[partition]@offset``).

One exception to "untouched": a job of a multi-job record (``squeue``/``sacct --json``)
refused on its own while its neighbours go on has that job's own JSON as its value, and a
``part`` header, its index in the record's ``jobs`` (``source`` says where the record is).
Delivery is asynchronous (``Producer.produce``): the caller must ``flush()`` the producer
before it commits the input offsets, or a crash could lose the DLQ record.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import Producer

from pipeline.runtime.metrics import DLQ_RECORDS

__all__ = ["report_bad_record"]

#: Header values are cut to this length: a message may quote a whole bad record.
MAX_HEADER_CHARS = 4096


def report_bad_record(producer: Producer, topic: str, key: bytes | str | None,
                      value: bytes | str | None, reason: str, stage: str, error: str,
                      headers: Mapping[str, str] | None = None,
                      on_delivery: Callable[[Any, Any], None] | None = None) -> None:
    """Send one bad record to the DLQ topic (asynchronously; flush before committing).

    ``on_delivery(err, msg)`` is called from ``producer.poll``/``flush`` with the outcome.
    """
    all_headers = {"reason": reason, "stage": stage, "error": error, **(headers or {})}
    encoded = [(k, str(v)[:MAX_HEADER_CHARS].encode()) for k, v in all_headers.items()]
    while True:
        try:
            producer.produce(topic, key=key, value=value, headers=encoded,
                             on_delivery=on_delivery)
            DLQ_RECORDS.labels(stage, reason).inc()
            return
        except BufferError:
            # The local queue is full (Kafka slow or down): let deliveries drain, then retry.
            producer.poll(0.5)
