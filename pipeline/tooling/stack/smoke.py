"""A smoke round trip through the running stack: one record through Kafka, one document
through Elasticsearch, then both removed. ``python -m pipeline.tooling.stack.smoke`` brings the
stack up first; ``./run demo`` uses it until ``jobstream demo`` exists."""

from __future__ import annotations

import sys
import time
import uuid

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from elasticsearch import Elasticsearch
from rich.console import Console

from pipeline.kafka.producer import producer_config
from pipeline.runtime.config import Config, load_config
from pipeline.runtime.errors import JobstreamError, ServiceError
from pipeline.tooling.stack import ensure_up

__all__ = ["smoke"]


def smoke(cfg: Config) -> tuple[float, float]:
    """Round trip through each service; returns the seconds each took. ServiceError if the
    record or document does not come back as sent."""
    tag = uuid.uuid4().hex[:8]
    topic = f"jobstream.smoke.{tag}"
    started = time.monotonic()
    admin = AdminClient(cfg.librdkafka())
    # the cluster's default replication, as every topic jobstream creates (pipeline.kafka.topics)
    for future in admin.create_topics([NewTopic(topic, 1, replication_factor=-1)]).values():
        future.result(timeout=30)
    try:
        producer = Producer(producer_config(cfg, "jobstream-smoke"))
        producer.produce(topic, key=b"smoke", value=tag.encode())
        producer.flush(30)
        consumer = Consumer(cfg.librdkafka(**{"group.id": topic, "auto.offset.reset": "earliest"}))
        consumer.subscribe([topic])
        try:
            msg = next((m for m in (consumer.poll(1.0) for _ in range(30))
                        if m is not None and m.error() is None), None)
        finally:
            consumer.close()
        if msg is None or (msg.key(), msg.value()) != (b"smoke", tag.encode()):
            raise ServiceError(f"Kafka smoke test: the record did not come back from {topic}")
    finally:
        for future in admin.delete_topics([topic]).values():
            future.result(timeout=30)
    kafka_s = time.monotonic() - started

    started = time.monotonic()
    index = f"{cfg.elasticsearch.index_prefix}jobstream-smoke-{tag}"
    with Elasticsearch(cfg.elasticsearch.url, request_timeout=30) as es:
        try:
            es.index(index=index, id=tag, document={"tag": tag}, refresh=True)
            hits = es.search(index=index, query={"term": {"tag.keyword": tag}})["hits"]["hits"]
            if [h["_id"] for h in hits] != [tag]:
                raise ServiceError(f"Elasticsearch smoke test: the document is not found in "
                                   f"{index}")
        finally:
            es.options(ignore_status=404).indices.delete(index=index)
    return kafka_s, time.monotonic() - started


def main() -> int:
    console = Console(stderr=True)
    try:
        cfg = load_config()
        info = ensure_up(cfg, console=console)
        kafka_s, es_s = smoke(info.client_config(cfg))
    except JobstreamError as exc:
        console.print(f"[red]jobstream: error: {exc}[/]", highlight=False)
        return exc.exit_code
    console.print(f"[green]✓[/] Kafka round trip via {info.kafka_bootstrap} ({kafka_s:.1f} s)")
    console.print(f"[green]✓[/] Elasticsearch round trip via {info.elasticsearch_url} "
                  f"({es_s:.1f} s)")
    console.print("The stack stays up: `jobstream stack status`, `jobstream stack down`.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
