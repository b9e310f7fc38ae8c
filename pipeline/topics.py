"""Creating jobstream's topics with the settings each needs (idempotent).

Auto-created topics would get the broker's defaults: one partition and delete-retention,
which is wrong for the state topic (compacted) and the raw topic (the replay source: kept
long). Every process that writes calls :func:`ensure_topics` once on start.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from pipeline.config import Config
from pipeline.errors import ServiceError

__all__ = ["RAW_MAX_MESSAGE_BYTES", "ensure_topics", "topic_specs"]

logger = logging.getLogger(__name__)


#: Largest message of the raw topic and the DLQ (which keeps raw records as they came). A
#: source record can be big (a jobspec with a large user attribute, a sacct dump of many
#: jobs): up to ~10 MB must go through, and the broker's default is 1 MiB. Producers of
#: these topics need ``message.max.bytes`` at least as big. The other topics keep the
#: default: the agents cut events to ``worker.max_event_bytes``.
RAW_MAX_MESSAGE_BYTES = 16 * 1024 * 1024


def topic_specs(cfg: Config) -> dict[str, dict[str, str]]:
    """Topic name -> its topic configs."""
    t = cfg.topics
    big = {"max.message.bytes": str(RAW_MAX_MESSAGE_BYTES)}
    return {
        t.raw: {"retention.ms": "-1", **big},  # the source of truth for replays
        t.events: {"retention.ms": str(30 * 86400 * 1000)},
        t.state: {"cleanup.policy": "compact"},
        t.snapshots: {"retention.ms": str(7 * 86400 * 1000)},
        t.dlq: {"retention.ms": str(30 * 86400 * 1000), **big},
    }


def ensure_topics(cfg: Config, timeout: float = 30.0, *,
                  extra: Mapping[str, Mapping[str, str]] | None = None) -> list[str]:
    """Create the missing topics of ``cfg`` (and ``extra``: name -> topic configs, e.g. a
    process's internal topics); returns the names created."""
    admin = AdminClient(cfg.librdkafka())
    try:
        existing = set(admin.list_topics(timeout=timeout).topics)
    except KafkaException as exc:
        raise ServiceError(f"Kafka at {cfg.kafka.bootstrap} does not answer: {exc}") from exc
    specs = {**topic_specs(cfg), **(extra or {})}
    missing = [NewTopic(name, cfg.kafka.partitions, replication_factor=-1, config=dict(conf))
               for name, conf in specs.items() if name not in existing]
    if not missing:
        return []
    created = []
    for name, future in admin.create_topics(missing, operation_timeout=timeout).items():
        try:
            future.result(timeout=timeout)
            created.append(name)
        except KafkaException as exc:
            if exc.args[0].name() != "TOPIC_ALREADY_EXISTS":
                raise ServiceError(f"cannot create topic {name}: {exc}") from exc
    logger.info("created topics %s", ", ".join(created))
    return created
