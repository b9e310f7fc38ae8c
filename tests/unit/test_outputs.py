"""The worker's outputs (agents/outputs.py): a record whose delivery failed is produced
again until Kafka confirms it; one Kafka can never take goes to the DLQ, and a fatal
producer error stops the worker. The producer is
a stand-in that reports the deliveries it is told to fail (the real one, against a broker
that goes away, is in tests/faults)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from agents.outputs import Outputs
from pipeline.runtime.config import Config


class Message:
    def __init__(self, topic: str, key: bytes | None, value: bytes | None,
                 headers: Any, partition: int) -> None:
        self._t, self._k, self._v, self._h, self._p = topic, key, value, headers, partition
        self.offset = -1

    def partition(self) -> int:
        return self._p

    def topic(self) -> str:
        return self._t

    def key(self) -> bytes | None:
        return self._k

    def value(self) -> bytes | None:
        return self._v

    def headers(self) -> Any:
        return self._h


class Producer:
    """Delivers at flush; the n-th produce call fails with ``fail[n]``."""

    def __init__(self, fail: dict[int, int | KafkaError]) -> None:
        self.fail = fail
        self.calls = 0
        self.queued: list[tuple[Message, Any, int | None]] = []
        self.delivered: list[tuple[str, bytes | None, bytes | None, Any]] = []
        self.partitions: list[int] = []  # of the records delivered

    def produce(self, topic: str, value: bytes | None, key: bytes | None, *, partition: int,
                headers: Any, on_delivery: Any) -> None:
        self.queued.append((Message(topic, key, value, headers, partition), on_delivery,
                            self.fail.get(self.calls)))
        self.calls += 1

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        queued, self.queued = self.queued, []
        for msg, callback, code in queued:
            if code is None:
                self.delivered.append((msg.topic(), msg.key(), msg.value(), msg.headers()))
                self.partitions.append(msg.partition())
                callback(None, msg)
            else:
                callback(code if isinstance(code, KafkaError) else KafkaError(code), msg)
        return 0

    def __len__(self) -> int:
        return len(self.queued)


def test_a_failed_delivery_is_sent_again_with_its_headers() -> None:
    producer = Producer({1: KafkaError._MSG_TIMED_OUT})
    outputs = Outputs(Config(), "test", producer=producer)
    outputs.send("events", b"k1", b"v1")
    outputs.send("dlq", b"k2", b"v2", [("reason", b"bad-avro")])
    asyncio.run(outputs.flush())
    assert sorted(producer.delivered) == [("dlq", b"k2", b"v2", [("reason", b"bad-avro")]),
                                          ("events", b"k1", b"v1", None)]
    assert producer.calls == 3


def test_a_failed_record_goes_again_to_its_partition_and_is_reported_once() -> None:
    producer = Producer({0: KafkaError._MSG_TIMED_OUT})
    outputs = Outputs(Config(), "test", producer=producer)
    reported: list[int] = []
    outputs.send("changelog", b"k", b"v", partition=5,
                 on_delivery=lambda msg: reported.append(msg.partition()))
    outputs.send("events", b"k", b"e")
    asyncio.run(outputs.flush())
    assert producer.calls == 3
    assert sorted(zip(producer.delivered, producer.partitions, strict=True)) == [
        (("changelog", b"k", b"v", None), 5), (("events", b"k", b"e", None), -1)]
    assert reported == [5]


def test_a_record_kafka_can_never_take_goes_to_the_dlq_and_the_rest_goes_on() -> None:
    """A state or changelog record over the topic's size stopped the worker, and the same
    input made it again after every restart."""
    producer = Producer({0: KafkaError.MSG_SIZE_TOO_LARGE})
    outputs = Outputs(Config(), "test", producer=producer)
    outputs.send("state", b"k", b"x" * 10)
    outputs.send("events", b"k", b"e")
    asyncio.run(outputs.flush())
    dlq = Config().topics.dlq
    assert [(t, k, v) for t, k, v, _ in producer.delivered] == [
        ("events", b"k", b"e", ), (dlq, b"k", b"x" * 10)]
    headers = dict(producer.delivered[1][3])
    assert headers["reason"] == b"msg_size_too_large" and headers["stage"] == b"outputs"
    assert headers["origin"] == b"output to state"


def test_a_dlq_record_kafka_refuses_goes_again_without_its_value() -> None:
    producer = Producer({0: KafkaError.MSG_SIZE_TOO_LARGE, 1: KafkaError.MSG_SIZE_TOO_LARGE})
    outputs = Outputs(Config(), "test", producer=producer)
    outputs.send("state", b"k", b"x" * 10)
    asyncio.run(outputs.flush())
    [(topic, key, value, headers)] = producer.delivered
    assert (topic, key, value) == (Config().topics.dlq, b"k", None)
    assert dict(headers)["value_bytes"] == b"10" and b"value" in dict(headers)["dropped"]


def test_a_fatal_producer_error_stops_the_worker() -> None:
    producer = Producer({0: KafkaError(KafkaError._FENCED, fatal=True)})
    outputs = Outputs(Config(), "test", producer=producer)
    outputs.send("state", b"k", b"x")
    with pytest.raises(KafkaException):
        asyncio.run(outputs.flush())


class HoldingProducer(Producer):
    """Delivers at flush, except the records of topic ``held`` while ``holding``."""

    holding = True

    def flush(self, timeout: float) -> int:
        held = [q for q in self.queued if self.holding and q[0].topic() == "held"]
        self.queued = [q for q in self.queued if q not in held]
        super().flush(timeout)
        self.queued = held
        return len(held)


def test_a_tally_is_confirmed_by_its_own_records_while_later_ones_wait() -> None:
    """The jobs stage confirms a batch while the next is folded: a confirmation waits for
    its tally's records, a failed one among them sent again, not for the records sent
    after the cut."""
    producer = HoldingProducer({1: KafkaError._MSG_TIMED_OUT})
    outputs = Outputs(Config(), "test", producer=producer)

    async def run() -> tuple[bool, bool]:
        outputs.send("events", b"k1", b"v1")
        outputs.send("events", b"k2", b"v2")
        first = outputs.cut()
        outputs.send("held", b"k3", b"v3")
        second = outputs.cut()
        await asyncio.wait_for(outputs.confirm(first), 5)
        waiting = asyncio.ensure_future(outputs.confirm(second))
        await asyncio.sleep(0.3)
        held = not waiting.done()
        producer.holding = False
        await asyncio.wait_for(waiting, 5)
        return held, waiting.done()

    held, done = asyncio.run(run())
    assert held and done
    assert sorted(producer.delivered) == [("events", b"k1", b"v1", None),
                                          ("events", b"k2", b"v2", None),
                                          ("held", b"k3", b"v3", None)]
    assert producer.calls == 4
