"""The overview's "why a job waits" panels (issue 13): pending jobs by reason per queue from
the reason snapshots, pending cores by user and bank, the reason in the pending jobs table."""

from __future__ import annotations

from typing import Any

from pipeline.dashboards import overview


def _panel(title: str) -> dict[str, Any]:
    (found,) = [p for p in overview.build()["panels"] if p["title"] == title]
    return found


def _buckets(target: dict[str, Any]) -> list[tuple[str, str]]:
    return [(b["type"], b.get("field", "")) for b in target["bucketAggs"]]


def test_pending_jobs_by_reason_per_queue_means_the_reason_snapshots() -> None:
    p = _panel("Pending jobs by reason per queue")
    by_ref = {t["refId"]: t for t in p["targets"]}
    a = by_ref["A"]
    assert a["datasource"]["uid"] == "jobstream-snapshots"
    assert [(m["type"], m.get("field")) for m in a["metrics"]] == [("sum", "reason_jobs")]
    assert _buckets(a) == [("terms", "queue"), ("terms", "reason"),
                           ("date_histogram", "timestamp")]
    # the mean over a bucket's snapshot instants, as every other snapshot panel
    assert by_ref["Am"]["expression"] == "$A / $N"
    assert "reason" in p["fieldConfig"]["defaults"]["displayName"]


def test_pending_cores_by_user_and_bank_reads_pending_job_documents() -> None:
    p = _panel("Pending cores by user and bank")
    (t,) = p["targets"]
    assert t["query"].startswith("state:pending AND ")
    assert t["metrics"][0]["type"] == "sum" and t["metrics"][0]["field"] == "cores_req"
    assert _buckets(t) == [("terms", "bank"), ("terms", "user")]


def test_longest_waiting_table_has_the_reason_as_a_terms_level_and_column() -> None:
    p = _panel("Longest-waiting pending jobs")
    (t,) = p["targets"]
    levels = [b for b in t["bucketAggs"] if b["type"] == "terms"]
    reason = next(b for b in levels if b["field"] == "pending_reason")
    # one value per job, and a job without a reason keeps its row
    assert reason["settings"]["size"] == "1" and reason["settings"]["missing"] == "-"
    organize = next(x for x in p["transformations"] if x["id"] == "organize")
    order = organize["options"]["indexByName"]
    assert order["pending_reason"] == order["queue"] + 1
