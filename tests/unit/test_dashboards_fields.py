"""Fields a target uses and whether a mapping suits each use; the check's verdicts."""

from __future__ import annotations

from pipeline.dashboards.answers import classify_error, has_data
from pipeline.dashboards.check import (
    Status,
    TargetReport,
    _panel_status,
    _uid,
)
from pipeline.dashboards.datasources import JOBS_BY_END, by_uid
from pipeline.dashboards.fields import FieldUse, check_use, field_types, field_uses, query_fields

TYPES = field_types({"fields": {
    "queue": {"keyword": {}},
    "job_name": {"keyword": {}},
    "job_name.text": {"text": {}},
    "wait_s": {"double": {}},
    "t_end": {"date": {}},
    "run_interval": {"date_range": {}},
    "context": {"flattened": {}},
    "mixed": {"keyword": {}, "long": {}},
    "gone": {"unmapped": {}},
}})


def test_query_fields() -> None:
    assert query_fields('(cluster:* OR *:*) AND result:(failed OR oom) AND run_s:<60 '
                        'AND NOT context.status:0 AND _exists_:t_start '
                        'AND note:"a: b" AND event:(prolog-finish OR x)') == [
        "cluster", "result", "run_s", "context.status", "note", "event", "t_start"]
    assert query_fields("") == []
    assert query_fields("*") == []


def test_field_uses_of_a_target() -> None:
    target = {"query": "state:pending",
              "metrics": [{"id": "1", "type": "percentiles", "field": "wait_s"},
                          {"id": "2", "type": "count"}],
              "bucketAggs": [{"id": "3", "type": "terms", "field": "queue"},
                             {"id": "4", "type": "filters", "settings": {"filters": [
                                 {"query": "result:failed", "label": "f"}]}},
                             {"id": "5", "type": "date_histogram"}]}
    assert field_uses(target, "t_end") == [
        FieldUse("t_end", "time field"), FieldUse("queue", "terms"),
        FieldUse("result", "query"), FieldUse("wait_s", "percentiles"),
        FieldUse("state", "query")]


def test_suitable_and_unsuitable_uses() -> None:
    assert check_use(FieldUse("queue", "terms"), TYPES) is None
    assert check_use(FieldUse("context.type", "terms"), TYPES) is None  # flattened leaf
    assert check_use(FieldUse("t_end", "max"), TYPES) is None
    assert check_use(FieldUse("run_interval", "date_histogram"), TYPES) is None
    assert check_use(FieldUse("job_name.text", "query"), TYPES) is None
    reason, text = check_use(FieldUse("job_name.text", "terms"), TYPES)
    assert reason == "type-mismatch" and "text" in text
    assert check_use(FieldUse("queue", "percentiles"), TYPES)[0] == "type-mismatch"
    assert check_use(FieldUse("wait_s", "date_histogram"), TYPES)[0] == "type-mismatch"
    assert check_use(FieldUse("context", "terms"), TYPES)[0] == "type-mismatch"
    assert check_use(FieldUse("mixed", "sum"), TYPES)[0] == "type-mismatch"
    assert check_use(FieldUse("t_end", "time field"), TYPES) is None
    assert check_use(FieldUse("wait_s", "time field"), TYPES)[0] == "type-mismatch"
    for name in ("queeu", "gone", "context"):
        use = FieldUse(name, "sum")
        expected = "type-mismatch" if name == "context" else "unknown-field"
        assert check_use(use, TYPES)[0] == expected


def test_data_in_nested_buckets() -> None:
    target = {"metrics": [{"id": "1", "type": "percentiles", "field": "wait_s"}],
              "bucketAggs": [{"id": "2", "type": "terms"}, {"id": "3", "type": "date_histogram"}]}
    empty_bucket = {"key": 1, "doc_count": 0, "1": {"values": {"50.0": None}}}
    no_value = {"key": 2, "doc_count": 3, "1": {"values": {"50.0": None}}}
    value = {"key": 3, "doc_count": 3, "1": {"values": {"50.0": 12.5}}}

    def response(*leaves: dict) -> dict:
        return {"aggregations": {"2": {"buckets": [
            {"key": "batch", "doc_count": 3, "3": {"buckets": list(leaves)}}]}}}

    assert not has_data(target, response(empty_bucket, no_value))
    assert has_data(target, response(empty_bucket, value))
    raw = {"metrics": [{"id": "1", "type": "raw_data"}]}
    assert not has_data(raw, {"hits": {"hits": []}})
    assert has_data(raw, {"hits": {"hits": [{"_id": "x"}]}})
    filters = {"metrics": [{"id": "1", "type": "count"}],
               "bucketAggs": [{"id": "2", "type": "filters", "settings": {"filters": [
                   {"query": "a"}]}}]}
    assert has_data(filters, {"aggregations": {"2": {"buckets": {"a": {"doc_count": 2}}}}})


def test_panel_status() -> None:
    ok = TargetReport("A", "ds", Status.OK)
    empty = TargetReport("B", "ds", Status.EMPTY)
    broken = TargetReport("C", "ds", Status.BROKEN)
    expr = TargetReport("D", "__expr__", Status.OK)
    assert _panel_status([ok, empty, expr]) is Status.OK
    assert _panel_status([empty, expr]) is Status.EMPTY
    assert _panel_status([ok, broken]) is Status.BROKEN


def test_error_classification() -> None:
    text_terms = {"root_cause": [{"type": "illegal_argument_exception",
                                  "reason": "Fielddata is disabled on [job_name.text] in "
                                            "[hpc-jobs]. Text fields are not optimised"}],
                  "type": "search_phase_execution_exception", "reason": "all shards failed"}
    assert classify_error(text_terms, "")[0] == "type-mismatch"
    unknown_agg = {"root_cause": [{"type": "x_content_parse_exception",
                                   "reason": "[1:80] Unknown aggregation type [derivative] "
                                             "did you mean [...]?"}]}
    assert classify_error(unknown_agg, "")[0] == "unsupported-aggregation"
    missing = {"type": "index_not_found_exception", "reason": "no such index [x]"}
    assert classify_error(missing, "")[0] == "missing-index"
    assert classify_error("boom", "boom") == ("es-error", "boom")


def test_data_source_references() -> None:
    assert _uid({"type": "elasticsearch", "uid": "jobstream-jobs-end"}) == "jobstream-jobs-end"
    assert _uid({"type": "__expr__", "uid": "__expr__"}) == "__expr__"
    assert _uid("jobstream jobs by end time") == "jobstream jobs by end time"
    assert by_uid("jobstream jobs by end time") is JOBS_BY_END
    assert by_uid("jobstream-jobs-end") is JOBS_BY_END
    assert by_uid("nope") is None
