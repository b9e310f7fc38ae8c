"""What the parts can do alone, and what a site would write without jobstream.

* :func:`consume_ceiling` -- one process, one confluent-kafka consumer: raw records off the
  topic, Avro-decoded and parsed into canonical events, nothing else. No stream processor
  can beat it on the same topic in one process, so the e2e figure is stated against it.
* :func:`bulk_ceiling` -- prebuilt documents through the sink's own :class:`BulkClient`
  into indices made by the sink's templates, in batches of ``sink.max_batch``: what
  Elasticsearch takes from one writer, JSON encoding included.
* :func:`naive_baseline` -- one consumer that indexes each canonical event with its own
  index request as it comes (no bulk, no state): the script a site would otherwise write.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaException
from elasticsearch import Elasticsearch

from pipeline.codecs.codec import event_to_avro
from pipeline.codecs.wire import Wire
from pipeline.core.anonymize import Anonymizer
from pipeline.core.enrich import Enricher
from pipeline.parsers.normalize import normalize
from pipeline.runtime.config import Config
from pipeline.runtime.errors import ParseError, ServiceError
from pipeline.sink.client import BulkClient
from pipeline.sink.converter import Action, Converter
from pipeline.sink.names import Family
from pipeline.sink.templates import ensure_indices
from pipeline.tooling.bench.feed import Feed, raw_record

__all__ = ["CEILING_PASSES", "Rate", "bulk_ceiling", "consume_ceiling", "naive_baseline",
           "worker_event_documents"]

#: a consumer that sees nothing for this long has read everything there is
_IDLE_S = 10.0
#: reads of the topic for the consume ceiling, the fastest kept: a read lasts a second or
#: two, and the same code's single read moved by a factor of two between runs
#: (docs/benchmarks-history.md); the ceiling is what the process can do, not what the
#: machine's other work left it
CEILING_PASSES = 3


@dataclass(frozen=True)
class Rate:
    """``count`` things in ``seconds``."""

    count: int
    seconds: float
    #: records read (for the consumers; events are the count)
    records: int = 0

    @property
    def per_s(self) -> float:
        return self.count / self.seconds if self.seconds > 0 else 0.0


def _consumer(cfg: Config, **extra: Any) -> Consumer:
    consumer = Consumer(cfg.librdkafka(**{
        "group.id": f"{cfg.worker.app_id}-{uuid.uuid4().hex[:6]}",
        "auto.offset.reset": "earliest", "enable.auto.commit": False, **extra}))
    consumer.subscribe([cfg.topics.raw])
    return consumer


def _drain(cfg: Config, records: int, handle: Callable[[bytes], int],
           deadline_s: float | None = None) -> Rate:
    """Consume the raw topic from its beginning, ``handle`` each value (it returns the
    events it made), until ``records`` were read or ``deadline_s`` after the first one.
    Time runs from the first record (the group join is not the consumer's speed)."""
    consumer = _consumer(cfg)
    seen = events = 0
    first: float | None = None
    last_data = time.monotonic()
    try:
        while seen < records:
            msgs = consumer.consume(num_messages=1000, timeout=0.5)
            now = time.monotonic()
            if not msgs:
                if now - last_data > _IDLE_S + (60.0 if first is None else 0.0):
                    raise ServiceError(f"the raw topic {cfg.topics.raw} ended after {seen} "
                                       f"of {records} records")
                continue
            last_data = now
            if first is None:
                first = now
            for msg in msgs:
                if msg.error() is not None:
                    if msg.error().fatal():
                        raise ServiceError(f"kafka consumer failed: {msg.error()}")
                    continue
                seen += 1
                events += handle(msg.value() or b"")
            if deadline_s is not None and time.monotonic() - first >= deadline_s:
                break
        return Rate(events, time.monotonic() - (first or time.monotonic()), seen)
    except KafkaException as exc:
        raise ServiceError(f"kafka: {exc}") from exc
    finally:
        consumer.close()


def consume_ceiling(cfg: Config, records: int) -> Rate:
    """Canonical events/s of consume + decode + parse, one process."""
    wire = Wire(cfg)

    def handle(value: bytes) -> int:
        try:
            return len(normalize(wire.decode_raw(value)))
        except ParseError:
            return 0

    return _drain(cfg, records, handle)


def naive_baseline(cfg: Config, es: Elasticsearch, records: int, seconds: float) -> Rate:
    """Events/s of one consumer indexing every event with its own request (for at most
    ``seconds``, or ``records`` raw records)."""
    wire = Wire(cfg)
    converter = Converter(cfg.elasticsearch.index_prefix, "v1")
    ensure_indices(es, cfg.elasticsearch.index_prefix, "v1", live=True)

    def handle(value: bytes) -> int:
        try:
            events = normalize(wire.decode_raw(value))
        except ParseError:
            return 0
        for ev in events:
            action = converter.event(event_to_avro(ev))
            es.options(ignore_status=409).index(index=action.index, id=action.doc_id,
                                                document=action.source, op_type="create")
        return len(events)

    return _drain(cfg, records, handle, deadline_s=seconds)


def bulk_ceiling(cfg: Config, es: Elasticsearch, family: Family,
                 documents: Sequence[dict[str, Any]]) -> Rate:
    """Documents/s of the sink's bulk client writing ``documents`` (job documents or event
    dicts) in batches of ``sink.max_batch``, into fresh indices of the sink's templates."""
    prefix = cfg.elasticsearch.index_prefix
    ensure_indices(es, prefix, "v1", live=True)
    converter = Converter(prefix, "v1")
    actions: list[Action] = [converter.convert(family, d) for d in documents]
    bulk = BulkClient(es)
    batch = max(cfg.sink.max_batch, 1)
    started = time.monotonic()
    for i in range(0, len(actions), batch):
        for result in bulk.write(actions[i:i + batch]):
            if not result.outcome.done:
                raise ServiceError(f"bulk ceiling: {result.action.doc_id} was not written: "
                                   f"{result.status} {result.error_type} {result.error}")
    return Rate(len(actions), time.monotonic() - started)


def worker_event_documents(cfg: Config, feed: Feed) -> list[dict[str, Any]]:
    """The workload's canonical events as the sink decodes them from the events topic:
    enriched and anonymized as the worker does, through the JobEvent schema."""
    enricher = Enricher.from_config(cfg.enrich.passwd_file, cfg.enrich.users_file,
                                    cfg.enrich.topology_file)
    anonymizer = Anonymizer.from_config(cfg.anonymize.fields, cfg.anonymize.key_file)
    wire = Wire(cfg)
    codec = wire.codecs["events"]
    out = []
    for rec in feed.records:
        for ev in normalize(raw_record(rec)):
            event = ev.to_dict()
            event["facts"] = enricher.facts(event["facts"])
            out.append(codec.decode(wire.encode_event(anonymizer.event(event))))
    return out
