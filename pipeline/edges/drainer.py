"""The drainer of the producer edges: sends a spool's records to Kafka, in spool order.

The other half of :mod:`pipeline.edges.spool`: the spool makes a record durable before the
source is acknowledged; the :class:`Drainer` thread hands the records to one idempotent
confluent-kafka producer (``acks=all``) and deletes each from the spool only from the
delivery report that confirms it, so a crash at any moment sends again (duplicates the
agents drop) and never loses. Records Kafka will never accept are quarantined in the spool;
a spool that refuses writes (a full disk) is retried with backoff while delivery goes on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from pipeline.edges.spool import Spool, SpoolRecord
from pipeline.kafka.producer import POISON_ERRORS
from pipeline.runtime.backoff import retry
from pipeline.runtime.errors import SpoolError

__all__ = ["Drainer"]

logger = logging.getLogger(__name__)


class Drainer:
    """Sends a spool's records to Kafka in order and deletes each once Kafka confirmed it.

    Runs in its own thread. At most ``max_inflight`` records (``max_inflight_bytes``) are
    handed to librdkafka at once, which bounds the edge's memory however deep the spool is:
    librdkafka keeps a copy of each until it is confirmed, and another in the request that
    carries it, and an edge has 50 MB resident in all.
    When a delivery fails, the drainer waits for every record in flight, then starts again
    from the oldest record still in the spool, with exponential backoff while Kafka is down.

    :param on_acked: called in the drainer thread with the sequence numbers of each batch
        of records Kafka confirmed (after they were deleted from the spool).
    """

    def __init__(self, spool: Spool, producer_conf: dict[str, Any], *,
                 on_acked: Callable[[list[int]], None] | None = None,
                 max_inflight: int = 500, max_inflight_bytes: int = 2 << 20,
                 idle_poll_s: float = 0.5, backoff_max_s: float = 30.0) -> None:
        self.spool = spool
        self._conf = dict(producer_conf)
        self._conf.setdefault("error_cb", self._on_error)
        # librdkafka's own log lines go through logging (served by poll), not raw stderr
        self._conf.setdefault("logger", logging.getLogger(f"{__name__}.librdkafka"))
        self._on_acked = on_acked
        self._max_inflight = max_inflight
        self._max_inflight_bytes = max_inflight_bytes
        self._idle_poll_s = idle_poll_s
        self._backoff_max_s = backoff_max_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._producer: Any = None
        self._cursor = 0
        self._inflight: dict[int, int] = {}
        self._inflight_bytes = 0
        self._acked: list[int] = []
        self._failed = False
        self._fatal = False
        self._poison: list[tuple[int, str]] = []
        self._backoff = 0.0
        self._flush_s = 5.0
        self.delivered = 0
        self.last_error: str | None = None

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> Drainer:
        self._thread = threading.Thread(target=self._run, name=f"drainer-{self.spool.name}",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop; records in flight get ``timeout`` seconds to be confirmed (the rest stays
        spooled and is sent on the next start)."""
        self._flush_s = min(timeout, 5.0)
        self._stop.set()
        self.spool.wake()
        if self._thread is not None:
            self._thread.join(timeout + 5.0)
        self._thread = None

    def drain(self, timeout: float) -> bool:
        """Wait until the spool is empty (True) or the timeout passed (False)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.spool.depth() == 0:
                return True
            time.sleep(0.05)
        return self.spool.depth() == 0

    # -- the loop ----------------------------------------------------------------------

    def _new_producer(self) -> Any:
        from confluent_kafka import Producer
        return Producer(self._conf)

    def _run(self) -> None:
        self._producer = self._new_producer()
        try:
            while not self._stop.is_set():
                try:
                    self._step()
                except SpoolError as exc:
                    self._spool_failed(exc)
            self._finish(self._flush_s)
        except Exception:
            logger.exception("spool %s: drainer failed", self.spool.name)
            raise

    def _spool_failed(self, exc: SpoolError) -> None:
        """The spool file refused a write (a full disk refuses even a delete in WAL mode):
        keep sending and retry the deletes with backoff until space returns. Delivered
        records not yet deleted stay acknowledged in memory (or, after a crash, are sent
        again: duplicates, never a loss)."""
        if self.last_error != str(exc):
            logger.error("%s; the drainer retries until there is room", exc)
        self.last_error = str(exc)
        # a short cap: whoever frees the disk should see the spool drain soon after
        self._backoff = min(self._backoff_max_s, 5.0, max(1.0, self._backoff * 2))
        self._stop.wait(self._backoff)

    def _step(self) -> None:
        if self._failed or self._fatal:
            self._recover()
            return
        sent = self._send_more()
        self._producer.poll(0.05 if self._inflight else 0)
        self._settle()
        if not sent and not self._inflight:
            self.spool.wait_appended(self._idle_poll_s)

    def _send_more(self) -> int:
        if len(self._inflight) >= self._max_inflight:
            return 0
        room = self._max_inflight - len(self._inflight)
        sent = 0
        for rec in self.spool.read(self._cursor, min(room, 500)):
            if self._inflight_bytes >= self._max_inflight_bytes or self._failed:
                break
            outcome = self._produce(rec)
            if outcome == "failed":
                break
            self._cursor = rec.seq
            if outcome == "poison":
                continue
            self._inflight[rec.seq] = len(rec.value)
            self._inflight_bytes += len(rec.value)
            sent += 1
        return sent

    def _produce(self, rec: SpoolRecord) -> str:
        """Hand one record to librdkafka: ``sent``; ``poison`` when it is refused for good
        before sending (a record over ``message.max.bytes``: quarantined like one the
        broker refuses); ``failed`` for any other refusal (retried after a recovery)."""
        def produce() -> None:
            self._producer.produce(
                rec.topic, value=rec.value, key=rec.key, headers=list(rec.headers) or None,
                on_delivery=lambda err, msg, seq=rec.seq: self._on_delivery(seq, err))

        try:
            try:  # once as it is (retry's closures cost a microsecond on every record)
                produce()
            except BufferError:  # librdkafka's queue is full: let it send some
                retry(produce, on=BufferError, wait=lambda: self._producer.poll(0.1))
            return "sent"
        except Exception as exc:
            from confluent_kafka import KafkaException
            if not isinstance(exc, KafkaException):
                raise
            err = exc.args[0]
            if err.name() in POISON_ERRORS:
                self._poison.append((rec.seq, f"{err.name()}: {err.str()}"))
                return "poison"
            self.last_error = f"{err.name()}: {err.str()}"
            self._failed = True
            return "failed"

    def _on_delivery(self, seq: int, err: Any) -> None:
        self._inflight_bytes -= self._inflight.pop(seq, 0)
        if err is None:
            self._acked.append(seq)
            return
        name = err.name()
        if name in POISON_ERRORS:
            self._poison.append((seq, f"{name}: {err.str()}"))
            return
        self.last_error = f"{name}: {err.str()}"
        if err.fatal():
            self._fatal = True
        if not self._failed:
            logger.warning("spool %s: delivery failed (%s); records stay spooled and are "
                           "sent again", self.spool.name, self.last_error)
        self._failed = True

    def _on_error(self, err: Any) -> None:
        self.last_error = f"{err.name()}: {err.str()}"
        if err.fatal():
            self._fatal = True
        logger.info("spool %s: kafka: %s", self.spool.name, self.last_error)

    def _settle(self) -> None:
        for seq, reason in self._poison:
            logger.error("spool %s: record %d can never be delivered (%s); moved to "
                         "quarantine", self.spool.name, seq, reason)
            self.spool.quarantine(seq, reason)
        self._poison.clear()
        if not self._acked:
            return
        acked, self._acked = self._acked, []
        try:
            self.spool.delete(acked)
        except SpoolError:
            self._acked = acked + self._acked  # delivered: deleted once there is room
            raise
        self.delivered += len(acked)
        self._backoff = 0.0
        if self._on_acked is not None:
            self._on_acked(acked)

    def _recover(self) -> None:
        """After a failed delivery: let everything in flight resolve, then resend from the
        oldest record left, so no later record overtakes an earlier one for good."""
        while self._inflight and not self._stop.is_set():
            self._producer.poll(0.2)
            self._settle()
        self._settle()
        if self._fatal:
            logger.warning("spool %s: producer hit a fatal error (%s); starting a new one",
                           self.spool.name, self.last_error)
            self._producer = self._new_producer()
            self._fatal = False
        self._backoff = min(self._backoff_max_s, max(1.0, self._backoff * 2))
        self._stop.wait(self._backoff)
        self._cursor = 0
        self._inflight.clear()
        self._inflight_bytes = 0
        self._failed = False

    def _finish(self, timeout: float) -> None:
        if self._producer is not None:
            self._producer.flush(timeout)
            self._settle()
