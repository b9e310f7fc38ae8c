"""The sink's dead letters: a record the sink gives up on reaches the DLQ, whatever it holds.

Kafka Connect's DeadLetterQueueReporter, with one guarantee more: dead-lettering one
record can never stop the sink. :func:`pipeline.kafka.dlq.report_bad_record` writes the record
(original key and value, ``reason``/``stage``/``error`` headers); around it, this module
makes sure the DLQ can take it:

* **size**: a DLQ record over the DLQ topic's limit (``max.message.bytes``, 16 MiB:
  :data:`pipeline.kafka.topics.RAW_MAX_MESSAGE_BYTES`) or the producer's ``message.max.bytes``
  would be refused, by librdkafka at ``produce`` or by the broker in the delivery report,
  and the input could never be committed. Such a record goes without its value (the
  larger of key and value first, then the other if still needed), with headers that say
  what was dropped: ``value_bytes`` / ``value_sha256`` (``key_bytes`` / ``key_sha256``),
  so the original can be found and matched in the source topic. Sizes are checked before
  sending (:data:`DLQ_MAX_BYTES`, with room for Kafka's record overhead) and a refusal for
  size that still comes back is sent again stripped;
* **headers**: a header value is text made bytes as UTF-8; a lone surrogate (Elasticsearch
  cuts a value for its error message in UTF-16, and JSON hands a split pair over as one)
  cannot be, so it is escaped (``\\ud83d``) rather than raising out of the sink; the
  headers are made (and cut) as they will be sent (:func:`pipeline.kafka.dlq.header_text`),
  so that their size is known here.

A DLQ that refuses records for any other reason (authorization, a missing topic, a
timeout) is not about one record: :meth:`DeadLetters.deliver` raises a SinkError and the
input is not committed, as before.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from pipeline.kafka.dlq import dropped, header_text, report_bad_record
from pipeline.kafka.producer import POISON_ERRORS
from pipeline.kafka.topics import RAW_MAX_MESSAGE_BYTES
from pipeline.runtime.errors import SinkError

__all__ = ["DLQ_MAX_BYTES", "DeadLetters"]

logger = logging.getLogger(__name__)

#: Bytes Kafka adds to a record beside its key, value and headers (varints, timestamp
#: delta, attributes) and to the batch it travels in: a generous bound.
_RECORD_OVERHEAD = 64 * 1024

#: Largest DLQ record sent as it is: the DLQ topic's limit less the overhead.
DLQ_MAX_BYTES = RAW_MAX_MESSAGE_BYTES - _RECORD_OVERHEAD


@dataclass
class _Letter:
    key: bytes | str | None
    value: bytes | str | None
    reason: str
    error: str
    headers: dict[str, str] = field(default_factory=dict)


class DeadLetters:
    """Sends the sink's dead letters and waits until the DLQ has them all.

    :param producer: the DLQ producer (acks=all, idempotent)
    :param topic: the DLQ topic
    :param stage: the ``stage`` header
    :param max_bytes: the largest record sent whole (key, value and headers)
    """

    def __init__(self, producer: Producer, topic: str, *, stage: str = "sink",
                 max_bytes: int = DLQ_MAX_BYTES) -> None:
        self._producer = producer
        self._topic = topic
        self._stage = stage
        self._max_bytes = max_bytes
        self._again: list[_Letter] = []
        self._failures: list[str] = []

    def send(self, key: bytes | str | None, value: bytes | str | None, reason: str,
             error: str, headers: Mapping[str, str] | None = None, *,
             drop_value: str = "") -> None:
        """Send one dead letter (asynchronously: :meth:`deliver` before committing).

        ``drop_value``: why to send it without its value even if it fits (e.g. sending it
        whole is what killed the process before); empty = only when it does not fit.
        """
        letter = _Letter(key, value, header_text(reason), header_text(error),
                         {k: header_text(v) for k, v in (headers or {}).items()})
        if drop_value:
            _strip(letter, "value", drop_value)
        self._fit(letter)
        self._produce(letter)

    def deliver(self, wait: Callable[[], None]) -> None:
        """Wait until the DLQ has every dead letter sent (``wait()`` between attempts);
        SinkError if it refused one for another reason than its size."""
        while True:
            while self._producer.flush(5.0) > 0:
                logger.warning("waiting for the DLQ topic %s to accept records", self._topic)
                wait()
            if not self._again:
                break
            again, self._again = self._again, []
            for letter in again:
                self._produce(letter)
        if self._failures:
            errors, self._failures = self._failures, []
            raise SinkError(f"the DLQ topic {self._topic} refused {len(errors)} record(s): "
                            f"{errors[0]}")

    # -- one letter ------------------------------------------------------------------

    def _fit(self, letter: _Letter) -> None:
        """Drop the larger of key and value while the record is over the limit."""
        while _size(letter) > self._max_bytes:
            key, value = _nbytes(letter.key), _nbytes(letter.value)
            if not key and not value:
                return  # headers alone: bounded by MAX_HEADER_BYTES each, never this big
            part = "value" if value >= key else "key"
            _strip(letter, part, f"the record is over the DLQ's {self._max_bytes} bytes")

    def _produce(self, letter: _Letter) -> None:
        def on_delivery(err: KafkaError | None, _: Any) -> None:
            if err is None:
                return
            if err.name() in POISON_ERRORS and _strip_next(letter, f"the DLQ refused it: "
                                                                   f"{err.name()}"):
                logger.warning("the DLQ refused a record (%s): sending it again without %s",
                               err, "its value" if letter.key is not None else "key or value")
                self._again.append(letter)
            else:
                self._failures.append(str(err))

        while True:
            try:
                report_bad_record(self._producer, self._topic, letter.key, letter.value,
                                  letter.reason, self._stage, letter.error,
                                  headers=letter.headers, on_delivery=on_delivery)
                return
            except KafkaException as exc:
                # librdkafka's own checks (message.max.bytes), before anything is sent
                err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
                name = err.name() if err is not None else ""
                if not (name in POISON_ERRORS
                        and _strip_next(letter, f"the producer refused it: {name}")):
                    raise SinkError(f"the DLQ producer refused a record: {exc}") from exc




def _nbytes(part: bytes | str | None) -> int:
    if part is None:
        return 0
    return len(part) if isinstance(part, bytes) else len(part.encode("utf-8", "surrogatepass"))


def _size(letter: _Letter) -> int:
    return (_nbytes(letter.key) + _nbytes(letter.value) + len(letter.reason) * 4
            + len(letter.error) * 4 + sum(len(k) + len(v) * 4 for k, v in letter.headers.items())
            + 256)


def _strip(letter: _Letter, part: str, why: str) -> None:
    data = letter.key if part == "key" else letter.value
    if data is None:
        return
    letter.headers.update(dropped(part, data, why, letter.headers.get("dropped")))
    if part == "key":
        letter.key = None
    else:
        letter.value = None


def _strip_next(letter: _Letter, why: str) -> bool:
    """Drop the value, or if it is gone the key; False when nothing is left to drop."""
    for part in ("value", "key"):
        if getattr(letter, part) is not None:
            _strip(letter, part, why)
            return True
    return False
