"""What the sink counts: bulk items by index and Elasticsearch's answer, the requests'
latency and the retries (pipeline.sink.client), DLQ records (pipeline.kafka.dlq), and the offset
the consumer lag is measured from (pipeline.sink.offsets)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prometheus_client import REGISTRY

from pipeline.kafka.dlq import report_bad_record
from pipeline.sink.client import BulkClient
from pipeline.sink.converter import Action, Op
from pipeline.sink.names import Family
from pipeline.sink.offsets import OffsetTracker

CASES: dict[str, Any] = json.loads(
    (Path(__file__).parents[2] / "data" / "sink" / "bulk_responses.json").read_text())["cases"]


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


class _RecordedElasticsearch:
    """Answers each _bulk with the next list of recorded items."""

    def __init__(self, *answers: list[dict[str, Any]]) -> None:
        self.answers = list(answers)

    def bulk(self, **_: Any) -> dict[str, Any]:
        return {"items": self.answers.pop(0)}


def test_bulk_items_are_counted_by_index_and_outcome_with_latency_and_retries() -> None:
    reject, retry, ok = (CASES[n]["item"] for n in ("bad_date", "unassigned_shard",
                                                    "index_external_new"))
    es = _RecordedElasticsearch([reject, retry, ok], [ok])
    actions = [Action(Family.JOBS, Op.INDEX, "i", f"c1:{n}", {"n": n}) for n in range(3)]

    def items(outcome: str) -> float:
        return value("jobstream_sink_bulk_items_total", index="hpc-jobs", outcome=outcome)

    before = {o: items(o) for o in ("ok", "retry", "reject")}
    requests = value("jobstream_sink_bulk_seconds_count")
    retries = value("jobstream_sink_retries_total")
    BulkClient(es, sleep=lambda _: None).write(actions)  # type: ignore[arg-type]
    assert {o: items(o) - before[o] for o in before} == {"ok": 2, "retry": 1, "reject": 1}
    assert value("jobstream_sink_bulk_seconds_count") - requests == 2
    assert value("jobstream_sink_retries_total") - retries == 1


class _Producer:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def produce(self, topic: str, **kwargs: Any) -> None:
        self.sent.append(kwargs)


def test_a_dead_letter_is_counted_by_stage_and_reason() -> None:
    before = value("jobstream_dlq_records_total", stage="sink", reason="unit-reason")
    producer = _Producer()
    report_bad_record(producer, "dlq", b"k", b"v", "unit-reason", "sink",  # type: ignore[arg-type]
                      "why")
    assert len(producer.sent) == 1
    assert value("jobstream_dlq_records_total", stage="sink", reason="unit-reason") \
        == before + 1


def test_the_lag_is_measured_from_the_first_record_not_acknowledged() -> None:
    t = OffsetTracker()
    assert t.acknowledged_up_to(("t", 0)) is None
    for offset in (10, 11, 12):
        t.track("t", 0, offset)
    assert t.acknowledged_up_to(("t", 0)) == 10
    t.ack("t", 0, 11)  # a gap at 10 holds it back
    assert t.acknowledged_up_to(("t", 0)) == 10
    t.ack("t", 0, 10)
    t.ack("t", 0, 12)
    assert t.acknowledged_up_to(("t", 0)) == 13
