"""Contract of agents.faust_patches.clients: where Faust keeps its aiokafka consumer (made
in the consumer's thread) and producer, and how a call reaches that thread."""

from __future__ import annotations

import asyncio
import inspect
from types import SimpleNamespace
from typing import Any

import faust
import pytest
from faust.exceptions import ConsumerNotStarted
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

from agents.faust_patches import committed_offsets, kafka_consumer, kafka_producer


def test_the_consumer_is_the_threads_and_not_there_before_it_started() -> None:
    app = faust.App("clients-consumer", autodiscover=False)
    thread = app.consumer._thread
    assert isinstance(thread, AIOKafkaConsumerThread)
    with pytest.raises(ConsumerNotStarted):
        kafka_consumer(app.consumer)
    made = object()
    thread._consumer = made
    assert kafka_consumer(app.consumer) is made


def test_calls_reach_the_consumers_thread_through_call_thread() -> None:
    """Faust's own calls to aiokafka go through ``call_thread(fun, *args)``."""
    assert list(inspect.signature(AIOKafkaConsumerThread.call_thread).parameters) == [
        "self", "fun", "args", "kwargs"]
    assert "self.call_thread(" in inspect.getsource(AIOKafkaConsumerThread.highwaters)
    calls: list[Any] = []

    async def call_thread(fun: Any, *args: Any) -> Any:
        calls.append(args)
        return fun(*args)

    aio = SimpleNamespace(committed=lambda tp: {"a": 5}.get(tp))
    consumer = SimpleNamespace(_thread=SimpleNamespace(_ensure_consumer=lambda: aio,
                                                       call_thread=call_thread))
    assert asyncio.run(committed_offsets(consumer, ["a", "b"])) == {"a": 5, "b": None}
    assert calls == [("a",), ("b",)]


def test_the_producer_is_none_until_faust_started_it() -> None:
    app = faust.App("clients-producer", autodiscover=False)
    assert "_producer" in vars(type(app.producer)) and kafka_producer(app.producer) is None
    made = object()
    app.producer._producer = made
    assert kafka_producer(app.producer) is made
