"""Bulk item classification (on answers recorded from a real Elasticsearch) and backoff."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pipeline.sink.client import Outcome, classify

RECORDED = Path(__file__).parents[2] / "data" / "sink" / "bulk_responses.json"
CASES: dict[str, Any] = json.loads(RECORDED.read_text())["cases"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_recorded_item_is_classified(name: str) -> None:
    case = CASES[name]
    ((op, body),) = case["item"].items()
    outcome, etype, text = classify(op, body)
    assert outcome == Outcome(case["expected"])
    if outcome is Outcome.REJECT:
        # the DLQ reason is the error type; the text says what is wrong with the document
        assert etype == body["error"]["type"] and text


def test_every_outcome_is_recorded() -> None:
    assert {c["expected"] for c in CASES.values()} == {o.value for o in Outcome}


def test_rejection_text_includes_the_cause() -> None:
    ((op, body),) = CASES["wrong_type"]["item"].items()
    _, _, text = classify(op, body)
    assert "failed to parse field [uid]" in text and "not-a-number" in text


def test_conflict_on_a_non_conflict_status_is_not_success() -> None:
    # Only a 409 version conflict means "already applied".
    outcome, _, _ = classify("index", {"status": 400, "error": {
        "type": "version_conflict_engine_exception", "reason": "x"}})
    assert outcome is Outcome.FAIL


def test_missing_index_on_delete_is_nothing_to_delete() -> None:
    outcome, _, _ = classify("delete", {"status": 404, "error": {
        "type": "index_not_found_exception", "reason": "no such index"}})
    assert outcome is Outcome.DUPLICATE
    outcome, _, _ = classify("index", {"status": 404, "error": {
        "type": "index_not_found_exception", "reason": "no such index"}})
    assert outcome is Outcome.FAIL


def test_done_outcomes() -> None:
    assert {o for o in Outcome if o.done} == {Outcome.OK, Outcome.DUPLICATE}


