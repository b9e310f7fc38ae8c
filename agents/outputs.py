"""The worker's output records (canonical events, job states, snapshots, re-keyed events,
DLQ records, the jobs table's changelog) through one confluent-kafka producer, flushed
before their inputs are acknowledged.

Faust's ``await topic.send()`` costs about 0.1 ms of CPU per record here (a future, a
callback, aiokafka's accumulator in Python), more than parsing an event; librdkafka's
``produce`` queues a record in C for a few microseconds. Faust commits only acknowledged
offsets, so the rule that keeps a crash from losing an output is: :meth:`Outputs.flush`
(every record Kafka confirmed) before the records they came from are acknowledged.

The producer is :func:`pipeline.kafka.producer.producer_config`'s: idempotent, ``acks=all``, and
``murmur2_random``, the partitioner of Faust's table and of the edges, so a re-keyed
event lands in its job's partition of the canonical topic; it lingers longer than the
edges' (:data:`PRODUCER_DEFAULTS`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, NamedTuple

from confluent_kafka import KafkaError, KafkaException, Producer

from pipeline.kafka.dlq import dlq_headers, dropped, encode_headers
from pipeline.kafka.producer import POISON_ERRORS, producer_config
from pipeline.runtime.backoff import Backoff, retry
from pipeline.runtime.config import Config
from pipeline.runtime.metrics import DLQ_RECORDS

__all__ = ["PRODUCER_DEFAULTS", "Outputs"]

logger = logging.getLogger(__name__)

#: how long one flush waits in librdkafka before it says it is still waiting
FLUSH_WAIT_S = 10.0

#: The worker's producer defaults (a site's properties file overrides them). A batch's
#: records leave when the batch is flushed (librdkafka's flush sends at once, whatever
#: the linger), so lingering only keeps librdkafka from sending a batch piece by piece
#: every few milliseconds while it is being folded, a produce request each time for
#: the worker and the broker; what is sent outside a batch (queue snapshots, expiry
#: words) waits at most this long.
PRODUCER_DEFAULTS = {"linger.ms": 1000}


class Outputs:
    """Records to Kafka, confirmed by :meth:`flush`; a record whose delivery failed is
    produced again until it is confirmed (the consumers drop copies: events by id, job
    states by revision). A record Kafka can never take (too large, refused as invalid:
    ``POISON_ERRORS``) goes to the DLQ instead, its value too if the DLQ takes it, else
    its size and SHA-256: stopping the worker on it would stop it again after every
    restart, as the same input gives the same record. A fatal producer error stops it."""

    def __init__(self, cfg: Config, client_id: str, *, producer: Any = None) -> None:
        self._cfg, self._client_id, self._made = cfg, client_id, producer
        self._failed: list[tuple[_Record, KafkaError]] = []
        # delivery reports, one per on_delivery callback (None: plain records), made once
        # (not a closure per record on the hot path)
        self._reports: dict[Callable[[Any], None] | None, Callable[..., None]] = {}

    @property
    def _producer(self) -> Any:
        """Made at the first record: the app is built (and tested) where no broker is."""
        if self._made is None:
            self._made = Producer(producer_config(self._cfg, self._client_id,
                                                  defaults=PRODUCER_DEFAULTS))
        return self._made

    def send(self, topic: str, key: bytes | None, value: bytes | None,
             headers: list[tuple[str, bytes]] | None = None, *, partition: int | None = None,
             on_delivery: Callable[[Any], None] | None = None) -> None:
        """Queue one record (confirmed by the next :meth:`flush`): to ``partition``, or
        the key's; ``on_delivery(message)`` once Kafka confirmed it (in the thread that
        serves delivery reports)."""
        report = self._reports.get(on_delivery)
        if report is None:
            report = self._reports[on_delivery] = self._reporter(on_delivery)
        def produce() -> None:
            self._producer.produce(topic, value, key,
                                   partition=-1 if partition is None else partition,
                                   headers=headers, on_delivery=report)

        try:  # once as it is (retry's closures cost a microsecond on every record)
            produce()
        except BufferError:  # librdkafka's queue is full: let it send some
            retry(produce, on=BufferError, wait=lambda: self._producer.poll(0.1))

    def _reporter(self, on_delivery: Callable[[Any], None] | None) -> Callable[..., None]:
        """The delivery report of records sent with ``on_delivery``: a failed record is
        kept to be sent again, as the report gives it back (its partition: the one it was
        sent to, or -1 if it failed before it had one)."""
        def report(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                record = _Record(msg.topic(), msg.key(), msg.value(), msg.headers(),
                                 msg.partition(), on_delivery)
                self._failed.append((record, err))
            elif on_delivery is not None:
                on_delivery(msg)

        return report

    def poll(self) -> None:
        """Serve delivery reports without waiting (records sent outside a batch)."""
        self._producer.poll(0)

    async def flush(self) -> None:
        """Wait until Kafka confirmed every record sent so far, resending failed ones."""
        backoff = Backoff(0.1, 5.0)
        while True:
            while await asyncio.to_thread(self._producer.flush, FLUSH_WAIT_S):
                logger.warning("outputs: Kafka has not confirmed %d records for %.0f s; "
                               "still waiting", len(self._producer), FLUSH_WAIT_S)
            if not self._failed:
                return
            failed, self._failed = self._failed, []
            fatal = [err for _, err in failed if err.fatal()]
            if fatal:
                raise KafkaException(fatal[0])
            poison = [(r, err) for r, err in failed if err.name() in POISON_ERRORS]
            for r, err in poison:
                self._dead_letter(r, err)
            failed = [(r, err) for r, err in failed if err.name() not in POISON_ERRORS]
            if not failed:
                continue
            errors = {err.name() for _, err in failed}
            delay = backoff.next()
            logger.warning("outputs: %d records failed (%s); sending them again in %.1f s",
                           len(failed), ", ".join(sorted(errors)), delay)
            await asyncio.sleep(delay)
            for r, _ in failed:
                self.send(r.topic, r.key, r.value, r.headers,
                          partition=None if r.partition < 0 else r.partition,
                          on_delivery=r.on_delivery)


    def _dead_letter(self, r: _Record, err: KafkaError) -> None:
        """A record Kafka refuses for what it is: to the DLQ with why; a DLQ record that
        is refused too goes again without its value (that cannot be refused)."""
        dlq = self._cfg.topics.dlq
        size = 0 if r.value is None else len(r.value)
        logger.error("outputs: Kafka refused a record of %s (%d bytes, %s); to %s", r.topic,
                     size, err.name(), dlq)
        if r.topic == dlq:
            if r.value is None:
                logger.error("outputs: the DLQ refused a record without its value: dropped")
                return
            headers = [*(r.headers or ()), *encode_headers(
                dropped("value", r.value, f"the DLQ refused it: {err.name()}"))]
            self.send(dlq, r.key, None, headers)
        else:
            self.send(dlq, r.key, r.value, dlq_headers(
                err.name().lower().lstrip("_"), "outputs", err.str(),
                {"origin": f"output to {r.topic}"}))
        DLQ_RECORDS.labels("outputs", err.name()).inc()


class _Record(NamedTuple):
    """A record as sent, to send it again if its delivery failed."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]] | None
    partition: int  # -1: the key's
    on_delivery: Callable[[Any], None] | None
