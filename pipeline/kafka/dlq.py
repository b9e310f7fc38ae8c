"""The dead-letter queue: every record a stage cannot handle goes to ``hpc.jobs.dlq``.

The DLQ record carries the original key and value bytes untouched, so that it can be
inspected and reprocessed after a fix, and headers that say why. This module is the one
place that names and builds them (:func:`dlq_headers`), so that every stage that gives up
on a record (the edges' ``publish``, the worker, the sink) says so in one vocabulary:

* ``reason`` -- a short machine word (``ParseError.reason``, an Elasticsearch error type);
* ``stage`` -- which stage gave up (``publish``, ``normalize``, ``state``, ``fold``,
  ``outputs``, ``sink``, ...);
* ``error`` -- the message a person reads;
* ``origin`` -- where the record was read: ``topic[partition]@offset`` (:func:`origin`),
  or ``path:line`` for a file ``jobstream publish`` read;

plus what a stage adds (``format``, ``part``). Every value is UTF-8 text of at most
:data:`MAX_HEADER_BYTES` bytes (:func:`header_text`): a message may quote a whole bad
record, and a lone surrogate (Elasticsearch cuts its messages in UTF-16) cannot be UTF-8.

One exception to "untouched": a job of a multi-job record (``squeue``/``sacct --json``)
refused on its own while its neighbours go on has that job's own JSON as its value, and a
``part`` header, its index in the record's ``jobs`` (``origin`` says where the record is).
A record Kafka will not take whole (too large) goes without its value, or its key: then
``value_bytes`` / ``value_sha256`` (``key_bytes`` / ``key_sha256``) say what it was, so the
original can be matched in the source, and ``dropped`` why (:func:`dropped`).

Delivery is asynchronous (``Producer.produce``): the caller must ``flush()`` the producer
before it commits the input offsets, or a crash could lose the DLQ record.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import Producer

from pipeline.runtime.backoff import retry
from pipeline.runtime.metrics import DLQ_RECORDS

__all__ = ["MAX_HEADER_BYTES", "dlq_headers", "dropped", "encode_headers", "header_text",
           "origin", "report_bad_record"]

#: Largest header value, in UTF-8 bytes: a message may quote a whole bad record.
MAX_HEADER_BYTES = 4096


def header_text(value: object) -> str:
    """``value`` as header text: lone surrogates escaped (``\\ud83d``), at most
    :data:`MAX_HEADER_BYTES` bytes in UTF-8, cut between characters."""
    text = str(value)[:MAX_HEADER_BYTES]  # no character is less than a byte
    raw = text.encode("utf-8", "backslashreplace")
    if len(raw) <= MAX_HEADER_BYTES:
        return text if len(raw) == len(text) else raw.decode("utf-8")
    return raw[:MAX_HEADER_BYTES].decode("utf-8", "ignore")  # a cut character goes whole


def encode_headers(headers: Mapping[str, object]) -> list[tuple[str, bytes]]:
    """Headers as Kafka takes them, each value :func:`header_text`."""
    return [(name, header_text(value).encode("utf-8")) for name, value in headers.items()]


def dlq_headers(reason: str, stage: str, error: str,
                extra: Mapping[str, object] | None = None) -> list[tuple[str, bytes]]:
    """The headers of a DLQ record: ``reason``, ``stage``, ``error`` and ``extra``
    (``origin``, ``part``, ... in the vocabulary above)."""
    return encode_headers({"reason": reason, "stage": stage, "error": error, **(extra or {})})


def origin(topic: str, partition: int, offset: int) -> str:
    """The ``origin`` header of a record read from Kafka."""
    return f"{topic}[{partition}]@{offset}"


def dropped(part: str, data: bytes | str, why: str, before: str | None = None
            ) -> dict[str, str]:
    """The headers that say ``part`` (``value`` or ``key``) of a record was left out:
    its size and SHA-256, and ``dropped`` (``before``, what an earlier drop said, kept)."""
    raw = data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass")
    note = f"{part}: {why}"
    return {f"{part}_bytes": str(len(raw)), f"{part}_sha256": hashlib.sha256(raw).hexdigest(),
            "dropped": f"{before}; {note}" if before else note}


def report_bad_record(producer: Producer, topic: str, key: bytes | str | None,
                      value: bytes | str | None, reason: str, stage: str, error: str,
                      headers: Mapping[str, str] | None = None,
                      on_delivery: Callable[[Any, Any], None] | None = None) -> None:
    """Send one bad record to the DLQ topic (asynchronously; flush before committing).

    ``on_delivery(err, msg)`` is called from ``producer.poll``/``flush`` with the outcome.
    """
    encoded = dlq_headers(reason, stage, error, headers)
    # a full local queue (Kafka slow or down): let deliveries drain, then again
    retry(lambda: producer.produce(topic, key=key, value=value, headers=encoded,
                                   on_delivery=on_delivery),
          on=BufferError, wait=lambda: producer.poll(0.5))
    DLQ_RECORDS.labels(stage, reason).inc()
