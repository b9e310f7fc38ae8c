"""The worker's output records (canonical events, job states, snapshots, re-keyed events,
DLQ records, the jobs table's changelog) through one confluent-kafka producer, confirmed
before their inputs are acknowledged.

Faust's ``await topic.send()`` costs about 0.1 ms of CPU per record here (a future, a
callback, aiokafka's accumulator in Python), more than parsing an event; librdkafka's
``produce`` queues a record in C for a few microseconds. Faust commits only acknowledged
offsets, so the rule that keeps a crash from losing an output is: every record Kafka
confirmed before the records they came from are acknowledged.

**Tallies.** The jobs stage folds its next batch while Kafka confirms the last one
(:mod:`agents.jobs`), so "every record sent so far" is not what a batch waits for: the
records sent since the last :meth:`Outputs.cut` are a :class:`Tally`, and
:meth:`Outputs.confirm` waits for the delivery reports of that tally's records only
(counted in the thread that serves them), resending its failed ones into it.

The producer is :func:`pipeline.kafka.producer.producer_config`'s: idempotent, ``acks=all``, and
``murmur2_random``, the partitioner of Faust's table and of the edges, so a re-keyed
event lands in its job's partition of the canonical topic; it lingers longer than the
edges' (:data:`PRODUCER_DEFAULTS`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

from confluent_kafka import KafkaError, KafkaException, Producer

from pipeline.kafka.dlq import dlq_headers, dropped, encode_headers
from pipeline.kafka.producer import POISON_ERRORS, producer_config
from pipeline.runtime.backoff import Backoff, retry
from pipeline.runtime.config import Config
from pipeline.runtime.metrics import DLQ_RECORDS

__all__ = ["PRODUCER_DEFAULTS", "Outputs", "Tally"]

logger = logging.getLogger(__name__)

#: how long a confirmation waits for Kafka before it says it is still waiting
FLUSH_WAIT_S = 10.0
#: how long one wait in librdkafka lasts: a tally's last report is seen at most this late
POLL_S = 0.05

#: The worker's producer defaults (a site's properties file overrides them). A batch's
#: records leave when its confirmation begins: it waits in librdkafka's flush, which sends
#: at once whatever the linger (and what the next batch sends meanwhile with them). A
#: short linger sends a batch piece by piece while it is folded, a produce request each
#: time for the worker and the broker, and cost more than the overlap gained
#: (BENCHMARKS.md, "Overlap"); what is sent outside a batch (queue snapshots, expiry
#: words) waits at most this long.
PRODUCER_DEFAULTS = {"linger.ms": 1000}


class Tally:
    """The records sent between two :meth:`Outputs.cut`: how many were sent, how many
    Kafka reported on (in librdkafka's thread, hence the lock), and those that failed."""

    __slots__ = ("_lock", "confirming", "failed", "reported", "reports", "sent")

    def __init__(self) -> None:
        self.sent = 0
        self.reported = 0
        self.failed: list[tuple[_Record, KafkaError]] = []
        self._lock = threading.Lock()
        #: delivery reports, one per on_delivery callback (None: plain records), made
        #: once a tally (not a closure per record on the hot path)
        self.reports: dict[Callable[[Any], None] | None, Callable[..., None]] = {}
        #: the one confirmation of this tally, however many wait for it
        self.confirming: asyncio.Task[None] | None = None

    def report(self, failed: tuple[_Record, KafkaError] | None) -> None:
        with self._lock:
            self.reported += 1
            if failed is not None:
                self.failed.append(failed)

    def waiting(self) -> bool:
        """Whether some record of the tally has no report yet."""
        with self._lock:
            return self.reported < self.sent

    def take_failed(self) -> list[tuple[_Record, KafkaError]]:
        with self._lock:
            failed, self.failed = self.failed, []
            return failed


class Outputs:
    """Records to Kafka, confirmed by tally (:meth:`confirm`) or all at once
    (:meth:`flush`); a record whose delivery failed is produced again until it is
    confirmed (the consumers drop copies: events by id, job states by revision). A
    record Kafka can never take (too large, refused as invalid: ``POISON_ERRORS``) goes
    to the DLQ instead, its value too if the DLQ takes it, else its size and SHA-256:
    stopping the worker on it would stop it again after every restart, as the same input
    gives the same record. A fatal producer error stops it."""

    def __init__(self, cfg: Config, client_id: str, *, producer: Any = None) -> None:
        self._cfg, self._client_id, self._made = cfg, client_id, producer
        #: where :meth:`send` counts its records
        self._tally = Tally()
        #: the tallies cut and not confirmed yet, oldest first
        self._open: list[Tally] = []

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
        """Queue one record into the current tally: to ``partition``, or the key's;
        ``on_delivery(message)`` once Kafka confirmed it (in the thread that serves
        delivery reports)."""
        self._send(self._tally, topic, key, value, headers, partition, on_delivery)

    def _send(self, tally: Tally, topic: str, key: bytes | None, value: bytes | None,
              headers: list[tuple[str, bytes]] | None, partition: int | None,
              on_delivery: Callable[[Any], None] | None) -> None:
        report = tally.reports.get(on_delivery)
        if report is None:
            report = tally.reports[on_delivery] = self._reporter(tally, on_delivery)
        def produce() -> None:
            self._producer.produce(topic, value, key,
                                   partition=-1 if partition is None else partition,
                                   headers=headers, on_delivery=report)

        try:  # once as it is (retry's closures cost a microsecond on every record)
            produce()
        except BufferError:  # librdkafka's queue is full: let it send some
            retry(produce, on=BufferError, wait=lambda: self._producer.poll(0.1))
        tally.sent += 1

    @staticmethod
    def _reporter(tally: Tally,
                  on_delivery: Callable[[Any], None] | None) -> Callable[..., None]:
        """The delivery report of ``tally``'s records sent with ``on_delivery``: a failed
        record is kept to be sent again, as the report gives it back (its partition: the
        one it was sent to, or -1 if it failed before it had one)."""
        def report(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                tally.report((_Record(msg.topic(), msg.key(), msg.value(), msg.headers(),
                                      msg.partition(), on_delivery), err))
                return
            if on_delivery is not None:
                on_delivery(msg)
            tally.report(None)

        return report

    def poll(self) -> None:
        """Serve delivery reports without waiting (records sent outside a batch)."""
        self._producer.poll(0)

    def cut(self) -> Tally:
        """End the current tally (what was sent since the last cut) and start another;
        the tally ended, for :meth:`confirm`."""
        tally, self._tally = self._tally, Tally()
        self._open.append(tally)
        return tally

    async def confirm(self, tally: Tally) -> None:
        """Wait until Kafka confirmed every record of ``tally``, resending failed ones
        (the other tallies' records go on meanwhile). Callers waiting for the same tally
        share one confirmation."""
        if tally.confirming is None:
            tally.confirming = asyncio.ensure_future(self._confirm(tally))
        await asyncio.shield(tally.confirming)

    async def flush(self) -> None:
        """Wait until Kafka confirmed every record sent so far, resending failed ones."""
        self.cut()
        for tally in list(self._open):
            await self.confirm(tally)

    async def _confirm(self, tally: Tally) -> None:
        backoff = Backoff(0.1, 5.0)
        while True:
            await self._reported(tally)
            failed = tally.take_failed()
            if not failed:
                self._open.remove(tally)
                return
            fatal = [err for _, err in failed if err.fatal()]
            if fatal:
                raise KafkaException(fatal[0])
            for r, err in failed:
                if err.name() in POISON_ERRORS:
                    self._dead_letter(tally, r, err)
            failed = [(r, err) for r, err in failed if err.name() not in POISON_ERRORS]
            if not failed:
                continue
            errors = {err.name() for _, err in failed}
            delay = backoff.next()
            logger.warning("outputs: %d records failed (%s); sending them again in %.1f s",
                           len(failed), ", ".join(sorted(errors)), delay)
            await asyncio.sleep(delay)
            for r, _ in failed:
                self._send(tally, r.topic, r.key, r.value, r.headers,
                           None if r.partition < 0 else r.partition, r.on_delivery)

    async def _reported(self, tally: Tally) -> None:
        """Until Kafka reported on every record of ``tally``: in librdkafka's flush (which
        sends what lingers), a short wait at a time, since later tallies' records keep its
        queue from emptying."""
        waited = 0.0
        while tally.waiting():
            await asyncio.to_thread(self._producer.flush, POLL_S)
            waited += POLL_S
            if waited >= FLUSH_WAIT_S:
                logger.warning("outputs: Kafka has not confirmed %d records for %.0f s; "
                               "still waiting", tally.sent - tally.reported, waited)
                waited = 0.0

    def _dead_letter(self, tally: Tally, r: _Record, err: KafkaError) -> None:
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
            self._send(tally, dlq, r.key, None, headers, None, None)
        else:
            self._send(tally, dlq, r.key, r.value, dlq_headers(
                err.name().lower().lstrip("_"), "outputs", err.str(),
                {"origin": f"output to {r.topic}"}), None, None)
        DLQ_RECORDS.labels("outputs", err.name()).inc()


class _Record(NamedTuple):
    """A record as sent, to send it again if its delivery failed."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]] | None
    partition: int  # -1: the key's
    on_delivery: Callable[[Any], None] | None
