"""Reading what a topic holds, for the tests that check the flow's output: its records up
to its current end (:func:`read_topic`), its ends and a group's committed offsets. Shared by
the integration tests (``workers``) and the faults' harness."""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer
from confluent_kafka import TopicPartition as KTP
from confluent_kafka.admin import AdminClient

from pipeline.kafka.positions import Positions
from pipeline.runtime.config import Config

#: how long reading a topic to its end may take
GUARD_S = 240.0


@dataclass(frozen=True)
class Msg:
    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes]
    partition: int
    offset: int
    #: the producer's CreateTime, epoch milliseconds
    timestamp_ms: int = 0


@functools.cache
def _positions(bootstrap: str) -> Positions:
    """The Positions (one AdminClient) the helpers below share."""
    return Positions(AdminClient({"bootstrap.servers": bootstrap}))


def close_clients() -> None:
    """Drop the shared AdminClients at the session's end, so that they are destroyed
    before the interpreter's teardown: a librdkafka client destroyed while Python is torn
    down has threads that can no longer call into it (a CI run once ended in SIGSEGV after
    every test had passed)."""
    _positions.cache_clear()


def end_offsets(cfg: Config, topic: str) -> dict[int, int]:
    """partition -> high watermark (partitions of ``topic`` that exist). A partition that
    answers "not leader" (a broker just started, a topic just made) is asked again."""
    ends = _positions(cfg.kafka.bootstrap).ends([topic])
    return {p: end for (_, p), end in ends.items()}


def read_topic(cfg: Config, topic: str) -> list[Msg]:
    """Every message of ``topic`` up to its current end, in partition/offset order."""
    ends = end_offsets(cfg, topic)
    todo = {p for p, end in ends.items() if end > 0}
    out: list[Msg] = []
    if not todo:
        return out
    consumer = Consumer(cfg.librdkafka(**{
        "group.id": f"jobstream-test-read-{time.time_ns()}", "enable.auto.commit": False,
        "fetch.message.max.bytes": 32 * 1024 * 1024}))
    try:
        consumer.assign([KTP(topic, p, OFFSET_BEGINNING) for p in sorted(todo)])
        deadline = time.monotonic() + GUARD_S
        while todo:
            if time.monotonic() > deadline:
                raise AssertionError(f"hang guard: {topic} partitions {todo} not read to end")
            for msg in consumer.consume(1000, 0.5):
                if msg.error():
                    continue
                p = msg.partition()
                out.append(Msg(msg.key(), msg.value(), dict(msg.headers() or []), p,
                               msg.offset(), msg.timestamp()[1]))
                if msg.offset() + 1 >= ends[p]:
                    todo.discard(p)
    finally:
        consumer.close()
    out = [m for m in out if m.offset < ends[m.partition]]
    out.sort(key=lambda m: (m.partition, m.offset))
    return out


def committed(cfg: Config, group: str, topic: str, partitions: Iterable[int]) -> dict[int, int]:
    """partition -> the group's committed offset (negative if none)."""
    done = _positions(cfg.kafka.bootstrap).committed(group, [(topic, p) for p in partitions])
    return {p: off for (_, p), off in done.items()}
