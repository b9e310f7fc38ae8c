"""A bulk request Elasticsearch refuses as a whole is split until the offending items are
found alone: they are rejected (the runner dead-letters them), the rest is written.

Before, a 400 of the whole request (an ``_id`` over 512 bytes) or a 413 (a request over
``http.max_content_length``) raised a SinkError and the sink exited, again on every start.
A refusal that is not about the content (401, 403, 404) stays a sticky failure.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from elastic_transport import ApiResponseMeta, HttpHeaders, NodeConfig
from elasticsearch import ApiError

from pipeline.runtime.errors import SinkError
from pipeline.sink.client import BulkClient, Outcome
from pipeline.sink.converter import Action, Op
from pipeline.sink.names import Family


def api_error(status: int, etype: str, reason: str = "refused") -> ApiError:
    meta = ApiResponseMeta(status=status, http_version="1.1", headers=HttpHeaders(),
                           duration=0.0, node=NodeConfig("http", "localhost", 9200))
    return ApiError(etype, meta=meta, body={"error": {"type": etype, "reason": reason},
                                            "status": status})


class _Elasticsearch:
    """Answers _bulk like Elasticsearch: each item 201, unless ``refuse(body)`` says the
    whole request is refused (an ApiError to raise)."""

    def __init__(self, refuse: Callable[[list[dict[str, Any]]], ApiError | None]) -> None:
        self.refuse = refuse
        self.requests: list[list[str]] = []
        self.written: list[str] = []

    def bulk(self, *, operations: list[bytes], **_: Any) -> dict[str, Any]:
        lines = [json.loads(line) for op in operations for line in op.splitlines()]
        headers = [line for line in lines if set(line) <= {"index", "create", "delete"}]
        ids = [next(iter(h.values()))["_id"] for h in headers]
        self.requests.append(ids)
        error = self.refuse(headers)
        if error is not None:
            raise error
        self.written += ids
        return {"items": [{next(iter(h)): {"status": 201}} for h in headers]}


def actions(n: int, **ids: str) -> list[Action]:
    return [Action(Family.JOBS, Op.INDEX, "i", ids.get(f"a{k}", f"c1:{k}"), {"n": k}, 1,
                   origin=k) for k in range(n)]


def long_id_refused(headers: list[dict[str, Any]]) -> ApiError | None:
    for h in headers:
        if len(next(iter(h.values()))["_id"].encode()) > 512:
            return api_error(400, "action_request_validation_exception",
                             "Validation Failed: 1: id is too long, must be no longer than "
                             "512 bytes;")
    return None


def test_an_id_over_512_bytes_is_found_by_splitting_and_rejected_alone() -> None:
    es = _Elasticsearch(long_id_refused)
    results = BulkClient(es, sleep=lambda _: None).write(  # type: ignore[arg-type]
        actions(20, a13="x" * 600))
    outcomes = {r.action.origin: r.outcome for r in results}
    assert outcomes.pop(13) is Outcome.REJECT
    assert set(outcomes.values()) == {Outcome.OK}
    rejected = results[13]
    assert rejected.error_type == "action_request_validation_exception"
    assert rejected.status == 400 and "too long" in rejected.error
    assert sorted(es.written) == sorted(f"c1:{k}" for k in range(20) if k != 13)
    # bisection, not one request per item
    assert len(es.requests) < 20


def test_two_offending_items_in_one_request() -> None:
    es = _Elasticsearch(long_id_refused)
    results = BulkClient(es, sleep=lambda _: None).write(  # type: ignore[arg-type]
        actions(9, a0="y" * 513, a8="z" * 700))
    assert [r.outcome for r in results] == [Outcome.REJECT] + [Outcome.OK] * 7 + [
        Outcome.REJECT]


def test_a_request_too_large_is_split_until_it_fits() -> None:
    def too_large(headers: list[dict[str, Any]]) -> ApiError | None:
        return api_error(413, "content_too_long_exception") if len(headers) > 3 else None

    es = _Elasticsearch(too_large)
    results = BulkClient(es, sleep=lambda _: None).write(  # type: ignore[arg-type]
        actions(10))
    assert {r.outcome for r in results} == {Outcome.OK}
    assert sorted(es.written) == sorted(f"c1:{k}" for k in range(10))


def test_one_item_too_large_alone_is_rejected() -> None:
    def too_large(headers: list[dict[str, Any]]) -> ApiError | None:
        ids = [next(iter(h.values()))["_id"] for h in headers]
        return api_error(413, "") if "c1:4" in ids else None

    results = BulkClient(_Elasticsearch(too_large), sleep=lambda _: None).write(  # type: ignore[arg-type]
        actions(6))
    assert results[4].outcome is Outcome.REJECT and results[4].status == 413
    assert results[4].error_type  # a DLQ reason, never empty
    assert [r.outcome for i, r in enumerate(results) if i != 4] == [Outcome.OK] * 5


@pytest.mark.parametrize(("status", "etype"), [
    (401, "security_exception"), (403, "security_exception"),
    (404, "index_not_found_exception"), (400, "index_closed_exception"),
])
def test_a_refusal_that_is_not_about_the_content_stays_sticky(status: int, etype: str) -> None:
    es = _Elasticsearch(lambda _: api_error(status, etype))
    with pytest.raises(SinkError, match=str(status)):
        BulkClient(es, sleep=lambda _: None).write(actions(8))  # type: ignore[arg-type]
    assert len(es.requests) == 1  # not split: every item would be refused the same way


def test_an_action_over_max_content_length_is_rejected_before_sending() -> None:
    es = _Elasticsearch(lambda _: None)
    acts = actions(3)
    acts[1] = Action(Family.JOBS, Op.INDEX, "i", "big", {"blob": "b" * 5000}, 1, origin=1)
    results = BulkClient(es, sleep=lambda _: None,  # type: ignore[arg-type]
                         max_content_length=4096).write(acts)
    assert results[1].outcome is Outcome.REJECT
    assert results[1].error_type == "content_too_long"
    assert "big" not in [i for r in es.requests for i in r]
    assert [results[0].outcome, results[2].outcome] == [Outcome.OK, Outcome.OK]


def test_an_action_that_cannot_be_encoded_is_rejected_not_raised() -> None:
    es = _Elasticsearch(lambda _: None)
    acts = actions(3)
    acts[2] = Action(Family.JOBS, Op.INDEX, "i", "bad", {"s": "\ud800"}, 1, origin=2)
    results = BulkClient(es, sleep=lambda _: None).write(acts)  # type: ignore[arg-type]
    assert results[2].outcome is Outcome.REJECT and results[2].error_type == "unencodable"
    assert sorted(es.written) == ["c1:0", "c1:1"]


def test_every_item_refused_alone_alike_is_the_requests_fault_not_theirs() -> None:
    # a content-looking error that each item gets alone as well (a parameter a future
    # Elasticsearch refuses, say): dead-lettering all would empty the stream into the DLQ
    es = _Elasticsearch(lambda _: api_error(400, "illegal_argument_exception",
                                            "request [/_bulk] contains unrecognized parameter"))
    with pytest.raises(SinkError, match="each of 4"):
        BulkClient(es, sleep=lambda _: None).write(actions(4))  # type: ignore[arg-type]


def test_a_lone_item_refused_is_rejected_even_when_it_is_all_there_is() -> None:
    results = BulkClient(_Elasticsearch(long_id_refused), sleep=lambda _: None).write(  # type: ignore[arg-type]
        actions(1, a0="x" * 513))
    assert [r.outcome for r in results] == [Outcome.REJECT]
