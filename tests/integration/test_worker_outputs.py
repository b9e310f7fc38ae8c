"""The worker's outputs on a real broker: a flush delivers every record sent, however
long the producer lingers (the worker's batches rely on it: agents/outputs.py)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

from agents.outputs import FLUSH_WAIT_S, Outputs
from pipeline.runtime.config import Config

pytestmark = pytest.mark.integration


def test_a_flush_delivers_everything_whatever_the_linger(
        stack_cfg: Config, kafka_admin: AdminClient, tmp_path: Path,
        make_consumer: Callable[..., Consumer]) -> None:
    topic = f"{stack_cfg.topics.events}-linger-{uuid.uuid4().hex[:8]}"
    for future in kafka_admin.create_topics([NewTopic(topic, 3, 1)]).values():
        future.result(timeout=30)
    # a linger far longer than a flush waits: were it kept, the flush would not end
    props = tmp_path / "rdkafka.properties"
    props.write_text(f"linger.ms={int(FLUSH_WAIT_S * 1000 * 6)}\n")
    cfg = stack_cfg.replace(kafka={"properties_file": str(props)})
    outputs = Outputs(cfg, "test-linger")
    for n in range(100):
        outputs.send(topic, f"job{n}".encode(), b"x")
    asyncio.run(asyncio.wait_for(outputs.flush(), timeout=FLUSH_WAIT_S * 3))

    consumer = make_consumer(topic)
    got = 0
    for _ in range(60):
        got += sum(1 for m in consumer.consume(100, 1.0) if m.error() is None)
        if got >= 100:
            break
    assert got == 100
