"""The Kafka producer policy of jobstream: one place that says how every producer is set up.

Every confluent-kafka producer of jobstream (the edges' drainers, ``publish``, the worker's
outputs, the sink's DLQ, demo and bench) takes its properties from :func:`producer_config`,
and every one of them treats the errors in :data:`POISON_ERRORS` as the record's fault.
It lives below the edges, the worker and the sink because all of them share it; it imports
no Kafka client, so an edge that loads it pays for nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.runtime.config import Config
from pipeline.runtime.errors import ConfigError

__all__ = ["DEFAULT_PRODUCER", "POISON_ERRORS", "REQUIRED_PRODUCER", "producer_config"]

#: librdkafka settings jobstream needs for its guarantees; the properties file cannot undo
#: them. Every confluent producer of jobstream takes its properties from
#: :func:`producer_config` (the edges' drainers, publish, the sink's DLQ, demo and bench).
#: ``murmur2_random`` is the Java client's and aiokafka's (Faust's) partitioner: a job's
#: raw records land in the partition the worker's table keeps that job in (librdkafka's
#: default, ``consistent_random``, is a CRC32 of the key and places them elsewhere).
REQUIRED_PRODUCER = {"enable.idempotence": True, "acks": "all",
                     "partitioner": "murmur2_random"}
#: defaults the properties file may override.
DEFAULT_PRODUCER = {
    "linger.ms": 5,
    "compression.type": "lz4",
    # A failed batch is sent again from the spool, in order; this only bounds how long one
    # attempt may hang in librdkafka before the drainer takes over.
    "message.timeout.ms": 120_000,
    # The raw topic takes records up to 16 MiB (pipeline.kafka.topics.RAW_MAX_MESSAGE_BYTES, not
    # imported: the edges stay small); librdkafka's default refuses anything over 1 MB.
    "message.max.bytes": 16 * 1024 * 1024,
}


def producer_config(cfg: Config, client_id: str, *, defaults: Mapping[str, Any] | None = None,
                    **extra: Any) -> dict[str, Any]:
    """Producer properties: our defaults (the caller's ``defaults`` over
    :data:`DEFAULT_PRODUCER`), then ``cfg.librdkafka()`` (the site's properties file,
    untouched), then ``extra`` and what idempotent, in-order delivery requires."""
    props: dict[str, Any] = {"client.id": client_id, **DEFAULT_PRODUCER, **(defaults or {})}
    props.update(cfg.librdkafka())
    props.update(extra)
    for key, value in REQUIRED_PRODUCER.items():
        if key in props and str(props[key]).lower() != str(value).lower():
            raise ConfigError(f"kafka.properties_file sets {key}={props[key]}; jobstream's "
                              f"producers need {key}={str(value).lower()} for no-loss, "
                              "in-order delivery, each job in its worker's partition")
        props[key] = value
    return props


#: Kafka errors a retry can never fix: the record goes to the quarantine table (the
#: worker's outputs stop on them: agents/outputs.py).
POISON_ERRORS = frozenset({"MSG_SIZE_TOO_LARGE", "_MSG_SIZE_TOO_LARGE", "INVALID_RECORD",
                           "CORRUPT_MESSAGE", "INVALID_REQUIRED_ACKS", "RECORD_LIST_TOO_LARGE"})
