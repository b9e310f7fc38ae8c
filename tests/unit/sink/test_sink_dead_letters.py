"""Dead-lettering one record can never stop the sink either.

A DLQ record too large for the DLQ topic (librdkafka refuses it at ``produce``, or the
broker in the delivery report) goes without its value, with headers that say its size and
SHA-256; a header value no UTF-8 can hold (a lone surrogate in Elasticsearch's error text)
is escaped. A DLQ that refuses records for another reason (authorization, say) is still a
sticky failure: the input is not committed.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from confluent_kafka import KafkaError
from sink_fakes import Elasticsearch, Producer, Stack, job_doc

from pipeline.sink.deadletter import DeadLetters
from pipeline.sink.stats import SinkStats


def rejects(doc_id: str, reason: str = "failed to parse field [queue]") -> Elasticsearch:
    """Elasticsearch refusing ``doc_id`` for its content."""
    return Elasticsearch(item=lambda i: {"status": 400, "error": {
        "type": "document_parsing_exception", "reason": reason}} if i == doc_id
        else {"status": 201})


def test_a_dlq_record_refused_as_too_large_at_produce_goes_without_its_value(
        tmp_path: Path) -> None:
    producer = Producer(raise_at_produce=lambda v: v is not None and len(v) > 200)
    stack = Stack(tmp_path, es=rejects("c1:1"), producer=producer)
    stack.state(job_doc(0))
    big = stack.state(job_doc(1, job_name="n" * 1000))
    assert isinstance(stack.run(), SinkStats)
    (dead,) = stack.dlq()
    value = big.value()
    assert value is not None
    assert dead["value"] is None
    assert dead["headers"]["reason"] == "document_parsing_exception"
    assert dead["headers"]["value_bytes"] == str(len(value))
    assert dead["headers"]["value_sha256"] == hashlib.sha256(value).hexdigest()
    assert stack.log.committed == {(stack.cfg.topics.state, 0): 2}


def test_a_dlq_record_the_broker_refuses_as_too_large_is_sent_again_without_its_value(
        tmp_path: Path) -> None:
    too_large = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "Broker: Message size too large")
    producer = Producer(refuse=lambda v: too_large if v is not None and len(v) > 200 else None)
    stack = Stack(tmp_path, es=rejects("c1:1"), producer=producer)
    stack.state(job_doc(0))
    stack.state(job_doc(1, job_name="n" * 1000))
    assert isinstance(stack.run(), SinkStats)
    (dead,) = stack.dlq()
    assert dead["value"] is None and int(dead["headers"]["value_bytes"]) > 1000
    assert stack.log.committed == {(stack.cfg.topics.state, 0): 2}


def test_a_dlq_record_over_the_topic_limit_is_cut_before_sending() -> None:
    producer = Producer()
    dlq = DeadLetters(producer, "dlq", max_bytes=1000)  # type: ignore[arg-type]
    dlq.send(b"k", b"v" * 5000, "r", "why", {"origin": "t[0]@1"})
    dlq.send(b"k", b"small", "r", "why", {"origin": "t[0]@2"})
    dlq.deliver(lambda: None)
    big, small = producer.sent
    assert big["value"] is None and big["headers"]["value_bytes"] == "5000"
    assert small["value"] == b"small" and "value_bytes" not in small["headers"]


def test_a_header_no_utf8_can_hold_is_escaped(tmp_path: Path) -> None:
    # Elasticsearch cuts a field's value for its error text in UTF-16 and can split a
    # surrogate pair; JSON hands the half over as a lone surrogate
    stack = Stack(tmp_path, es=rejects("c1:0", "preview of field's value: 'ab\ud83d'"))
    stack.state(job_doc(0))
    assert isinstance(stack.run(), SinkStats)
    (dead,) = stack.dlq()
    assert "ab\\ud83d" in dead["headers"]["error"]
    assert stack.log.committed == {(stack.cfg.topics.state, 0): 1}


def test_a_dlq_refusing_for_another_reason_stays_sticky(tmp_path: Path) -> None:
    denied = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "not authorized")
    stack = Stack(tmp_path, es=rejects("c1:0"), producer=Producer(refuse=lambda _: denied))
    stack.state(job_doc(0))
    outcome = stack.run()
    assert isinstance(outcome, Exception) and "refused" in str(outcome)
    assert stack.log.committed == {}


@pytest.mark.parametrize("key", [None, b"k" * 3000])
def test_the_key_is_cut_when_it_is_what_is_over(key: bytes | None) -> None:
    producer = Producer()
    dlq = DeadLetters(producer, "dlq", max_bytes=2000)  # type: ignore[arg-type]
    dlq.send(key, b"v", "r", "why", {})
    dlq.deliver(lambda: None)
    (sent,) = producer.sent
    if key is None:
        assert sent["key"] is None and sent["value"] == b"v"
    else:
        # the larger of the two goes first: the value (one byte) is kept
        assert sent["key"] is None and sent["headers"]["key_bytes"] == "3000"
        assert sent["value"] == b"v"
