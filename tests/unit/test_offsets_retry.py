"""Positions retries a new topic's leadership errors instead of failing the caller."""

from __future__ import annotations

from concurrent.futures import Future

import pytest
from confluent_kafka import KafkaError, KafkaException

from pipeline.kafka import positions as offsets
from pipeline.runtime.errors import ServiceError


def _failing(code: int) -> Future[object]:
    future: Future[object] = Future()
    future.set_exception(KafkaException(KafkaError(code)))
    return future


@pytest.mark.parametrize("code", [KafkaError.NOT_LEADER_FOR_PARTITION,
                                  KafkaError.LEADER_NOT_AVAILABLE,
                                  KafkaError.UNKNOWN_TOPIC_OR_PART])
def test_leadership_errors_are_retried(code: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(offsets, "_RETRY_WAIT_S", 0.0)
    answers = [_failing(code), _failing(code)]
    done: Future[object] = Future()
    done.set_result(42)
    answers.append(done)
    assert offsets._retrying(lambda: offsets._result(answers.pop(0), "offsets of t")) == 42


def test_other_errors_fail_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(offsets, "_RETRY_WAIT_S", 0.0)
    calls = []

    def request() -> object:
        calls.append(1)
        return offsets._result(_failing(KafkaError.TOPIC_AUTHORIZATION_FAILED), "offsets of t")

    with pytest.raises(ServiceError, match="offsets of t"):
        offsets._retrying(request)
    assert len(calls) == 1
