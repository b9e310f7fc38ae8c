"""The aiokafka clients inside Faust's consumer and producer, for what Faust does not ask
of them.

Faust runs its aiokafka consumer in a thread of its own (``Consumer._thread``, made
``_ensure_consumer()``), and its producer wraps an aiokafka producer (``Producer._producer``,
None until it started); neither is public. The worker needs both for what Faust keeps to
itself: the consumer's metadata (the partitions of a topic, known to every member, where
Faust's ``topic_partitions`` is the group leader's alone), the group's commits as the
broker has them (the watchdog's), and whether the producer's metadata knows a topic yet
(the job query's).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["committed_offsets", "kafka_consumer", "kafka_producer"]


def kafka_consumer(consumer: Any) -> Any:
    """The aiokafka consumer of Faust's ``consumer`` (raises Faust's
    ``ConsumerNotStarted`` before its thread made it). Its methods that talk to the broker
    run in that thread (:func:`committed_offsets`)."""
    return consumer._thread._ensure_consumer()


async def committed_offsets(consumer: Any, tps: Iterable[Any]) -> dict[Any, int | None]:
    """The group's committed offset of each of ``tps`` as the broker has it (None: never
    committed), asked in the consumer's thread, one partition after the other."""
    thread = consumer._thread
    aio = thread._ensure_consumer()
    return {tp: await thread.call_thread(aio.committed, tp) for tp in tps}


def kafka_producer(producer: Any) -> Any | None:
    """The aiokafka producer of Faust's ``producer`` (None: not started yet)."""
    return getattr(producer, "_producer", None)
