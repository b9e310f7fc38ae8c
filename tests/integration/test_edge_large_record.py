"""A source record of several MB (a jobspec with a large user attribute or batch script)
goes through an edge to the raw topic, which takes up to 16 MiB: the edge's producer must
allow it too, or the record is quarantined on the edge host and never reaches the worker
(librdkafka's default limit is 1 MB: such a record made ``produce`` raise, which killed the
drainer thread, so the edge stopped delivering anything)."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

from confluent_kafka import Consumer

from pipeline.codecs.codec import raw_from_avro
from pipeline.core.model import RawRecord
from pipeline.edges.base import EdgeRuntime
from pipeline.edges.drainer import Drainer
from pipeline.edges.spool import Spool
from pipeline.kafka.producer import DEFAULT_PRODUCER, producer_config
from pipeline.kafka.topics import RAW_MAX_MESSAGE_BYTES, ensure_topics
from pipeline.runtime.config import Config


def test_a_10_mb_record_reaches_the_raw_topic(stack_cfg: Config) -> None:
    ensure_topics(stack_cfg)
    payload = json.dumps({"id": 42, "events": [], "jobspec": {
        "attributes": {"user": {"blob": "x" * 10_000_000}}}}).encode()
    edge = EdgeRuntime(stack_cfg, "large").start()
    try:
        edge.publish(RawRecord(cluster="c", scheduler="flux", format="flux-journal",
                               received_at=time.time(), payload=payload, key="c:42"))
        assert edge.drainer.drain(120), edge.drainer.last_error
        stats = edge.spool.stats()
    finally:
        edge.stop()
    assert stats.quarantined == 0
    consumer = Consumer(stack_cfg.librdkafka(**{
        "group.id": f"large-{time.time_ns()}", "auto.offset.reset": "earliest",
        "fetch.message.max.bytes": 32 * 1024 * 1024}))
    consumer.subscribe([stack_cfg.topics.raw])
    try:
        msg = None
        deadline = time.monotonic() + 60
        while msg is None and time.monotonic() < deadline:
            m = consumer.poll(1.0)
            if m is not None and not m.error():
                msg = m
    finally:
        consumer.close()
    assert msg is not None
    assert raw_from_avro(edge.codec.decode(msg.value())).payload == payload


def test_a_record_over_the_producer_limit_is_quarantined_and_the_rest_flows(
        stack_cfg: Config, tmp_path: Path) -> None:
    """A site's properties file may lower message.max.bytes: librdkafka then refuses a big
    record before sending it. It goes to the spool's quarantine; the drainer goes on."""
    ensure_topics(stack_cfg)
    props = tmp_path / "librdkafka.properties"
    props.write_text("message.max.bytes=100000\n")
    cfg = stack_cfg.replace(kafka={"properties_file": str(props)})
    spool = Spool(tmp_path / "s.db", topic=cfg.topics.raw)
    spool.append(b"k", b"small 1")
    big = spool.append(b"k", b"x" * 200_000)
    spool.append(b"k", b"small 2")
    drainer = Drainer(spool, producer_config(cfg, "test-limit")).start()
    try:
        assert drainer.drain(60), drainer.last_error
        assert drainer._thread is not None and drainer._thread.is_alive()
        stats = spool.stats()
    finally:
        drainer.stop(5.0)
        spool.close()
    assert stats.quarantined == 1 and drainer.delivered == 2
    with sqlite3.connect(tmp_path / "s.db") as db:
        [(seq, reason)] = db.execute("SELECT seq, reason FROM quarantine").fetchall()
    assert seq == big and "MSG_SIZE_TOO_LARGE" in reason


def test_the_edge_limit_is_the_raw_topic_limit() -> None:
    assert DEFAULT_PRODUCER["message.max.bytes"] == RAW_MAX_MESSAGE_BYTES
