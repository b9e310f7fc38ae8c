"""Elasticsearch answers to frames as Grafana's Elasticsearch data source makes them.

The targets are the shipped dashboards' own (``render.dashboards()``); each answer is
written here in the shape Elasticsearch gives to the request ``build_search`` makes for
that target, and :func:`_answers` checks that it answers that request (every aggregation
id of the answer is one the request asked for, at the same level). Expected names follow
the plugin's naming code and golden files (``metric_percentiles``: ``p25.0 counter``;
``metric_terms_table``: the terms field as column, then ``Count``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from pipeline.dashboards import render
from pipeline.dashboards.check import panels_of
from pipeline.dashboards.grafana_query import build_search, substitute, variable_values
from pipeline.dashboards.grafana_time import TimeRange
from pipeline.dashboards.preview.es_frames import FrameError, frames_of
from pipeline.dashboards.preview.frames import FieldType, Frame

T0 = 1_795_000_000_000
MINUTE = 60_000
RANGE = TimeRange(T0, T0 + 60 * MINUTE)
BOARDS = render.dashboards()


def _target(title: str, ref: str = "A") -> dict[str, Any]:
    for board in BOARDS:
        for panel in panels_of(board):
            if panel.get("title") == title:
                for target in panel.get("targets") or []:
                    if target.get("refId") == ref:
                        return substitute(target, variable_values(board))
    raise AssertionError(f"no target {ref} in a panel {title!r}")


def _check_aggs(asked: Mapping[str, Any], answer: Mapping[str, Any]) -> None:
    for agg_id, node in answer.items():
        if agg_id in ("doc_count", "key", "key_as_string"):
            continue
        assert agg_id in asked, f"aggregation {agg_id} was not asked for ({sorted(asked)})"
        inner = asked[agg_id].get("aggs") or {}
        buckets = node.get("buckets") if isinstance(node, Mapping) else None
        entries = buckets.values() if isinstance(buckets, Mapping) else buckets or []
        for bucket in entries:
            _check_aggs(inner, bucket)


def _answers(target: Mapping[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    """``response``, checked to answer the request Grafana sends for ``target``."""
    _, body = build_search(target, index="hpc-jobs", time_field=str(target["timeField"]),
                           time_range=RANGE, interval_ms=MINUTE)
    _check_aggs(body.get("aggs") or {}, response.get("aggregations") or {})
    if "hits" in response:
        assert body["size"] >= len(response["hits"]["hits"])
    return response


def _histogram(values: list[Any], metric: str = "1", *, counts: list[int] | None = None
               ) -> dict[str, Any]:
    """A date_histogram answer (epoch_millis keys) with a value metric ``metric``."""
    counts = counts or [1] * len(values)
    return {"buckets": [
        {"key_as_string": str(T0 + i * MINUTE), "key": T0 + i * MINUTE, "doc_count": n,
         metric: {"value": v}}
        for i, (v, n) in enumerate(zip(values, counts, strict=True))]}


def _series(frame: Frame) -> tuple[str, dict[str, str], list[int], list[Any]]:
    time, value = frame.fields
    assert (time.name, time.type, value.name, value.type) == (
        "Time", FieldType.TIME, "Value", FieldType.NUMBER)
    return value.display_name, value.labels, time.values, value.values


def _table(frame: Frame) -> list[tuple[str, FieldType]]:
    return [(f.name, f.type) for f in frame.fields]


# --------------------------------------------------------------------------- time series


def test_nested_terms_above_a_histogram_give_a_series_per_path_named_by_the_keys() -> None:
    target = _target("Pending jobs by reason per queue")
    response = _answers(target, {"aggregations": {"2": {"buckets": [
        {"key": "pbatch", "doc_count": 5, "3": {"buckets": [
            {"key": "Priority", "doc_count": 3, "4": _histogram([1.0, 2.0])},
            {"key": "Resources", "doc_count": 2, "4": _histogram([3.0, 0.0])}]}},
        {"key": "pdebug", "doc_count": 1, "3": {"buckets": [
            {"key": "QOSMaxJobsPerUserLimit", "doc_count": 1, "4": _histogram([4.0, 5.0])}]}},
    ]}}})
    frames = frames_of(target, response)
    assert [_series(f) for f in frames] == [
        ("pbatch Priority", {"queue": "pbatch", "reason": "Priority"},
         [T0, T0 + MINUTE], [1.0, 2.0]),
        ("pbatch Resources", {"queue": "pbatch", "reason": "Resources"},
         [T0, T0 + MINUTE], [3.0, 0.0]),
        ("pdebug QOSMaxJobsPerUserLimit", {"queue": "pdebug",
                                          "reason": "QOSMaxJobsPerUserLimit"},
         [T0, T0 + MINUTE], [4.0, 5.0]),
    ]
    assert {f.ref_id for f in frames} == {"A"}
    assert frames[0].meta == {"type": "timeseries-multi"}


def test_null_buckets_of_a_max_are_none_and_the_series_keeps_their_times() -> None:
    target = _target("Oldest pending job by queue")
    response = _answers(target, {"aggregations": {"2": {"buckets": [
        {"key": "pbatch", "doc_count": 2, "1": {"value": 900.0},
         "3": _histogram([600.0, None, 900.0], counts=[1, 0, 1])}]}}})
    (frame,) = frames_of(target, response)
    assert _series(frame) == ("pbatch", {"queue": "pbatch"},
                              [T0, T0 + MINUTE, T0 + 2 * MINUTE], [600.0, None, 900.0])


def test_percentiles_under_terms_with_an_alias_of_term_and_metric() -> None:
    target = _target("Wait since submit by queue (p50/p90/p99)")
    assert target["alias"] == "{{term queue}} {{metric}}"

    def waits(*values: float) -> dict[str, Any]:
        return {"values": dict(zip(("50.0", "90.0", "99.0"), values, strict=True))}

    response = _answers(target, {"aggregations": {"2": {"buckets": [
        {"key": "pbatch", "doc_count": 7, "3": {"buckets": [
            {"key": T0, "doc_count": 4, "1": waits(10.0, 50.0, 95.0)},
            {"key": T0 + MINUTE, "doc_count": 0,
             "1": {"values": {"50.0": None, "90.0": None, "99.0": None}}}]}}]}}})
    frames = frames_of(target, response)
    assert [_series(f) for f in frames] == [
        ("pbatch p50.0", {"queue": "pbatch"}, [T0, T0 + MINUTE], [10.0, None]),
        ("pbatch p90.0", {"queue": "pbatch"}, [T0, T0 + MINUTE], [50.0, None]),
        ("pbatch p99.0", {"queue": "pbatch"}, [T0, T0 + MINUTE], [95.0, None]),
    ]


def test_percentiles_without_alias_name_percent_and_field() -> None:
    target = _target("Prolog and epilog duration")
    response = _answers(target, {"aggregations": {"3": {"buckets": [
        {"key": T0, "doc_count": 3, "1": {"values": {"50.0": 1.5, "95.0": 4.0}},
         "2": {"values": {"50.0": 0.5, "95.0": 2.0}}}]}}})
    names = [_series(f)[0] for f in frames_of(target, response)]
    assert names == ["p50.0 prolog_s", "p95.0 prolog_s", "p50.0 epilog_s", "p95.0 epilog_s"]


def test_count_is_the_doc_count_and_the_alias_names_the_series() -> None:
    target = _target("Job flow: submits, starts, ends")
    response = _answers(target, {"aggregations": {"2": {"buckets": [
        {"key": T0, "key_as_string": str(T0), "doc_count": 12},
        {"key": T0 + MINUTE, "key_as_string": str(T0 + MINUTE), "doc_count": 0}]}}})
    (frame,) = frames_of(target, response)
    assert _series(frame) == ("submits", {}, [T0, T0 + MINUTE], [12.0, 0.0])


def test_count_by_terms_with_a_term_alias() -> None:
    target = _target("Job ends by result")
    response = _answers(target, {"aggregations": {"2": {"buckets": [
        {"key": "completed", "doc_count": 9, "3": {"buckets": [
            {"key": T0, "doc_count": 9}]}},
        {"key": "failed", "doc_count": 2, "3": {"buckets": [{"key": T0, "doc_count": 2}]}},
    ]}}})
    assert [_series(f)[:2] for f in frames_of(target, response)] == [
        ("completed", {"result": "completed"}), ("failed", {"result": "failed"})]


def test_two_kinds_of_metric_without_terms_are_named_by_type_and_field() -> None:
    target = _target("Active users and banks, cancelled before start")
    response = _answers(target, {"aggregations": {"3": {"buckets": [
        {"key": T0, "doc_count": 5, "1": {"value": 3}, "2": {"value": 2}}]}}})
    assert [_series(f)[0] for f in frames_of(target, response)] == [
        "Unique Count user", "Unique Count bank"]


def test_default_name_adds_the_metric_when_several_kinds_are_drawn() -> None:
    # a count beside a sum under terms: the keys alone would not tell them apart
    target = dict(_target("Node-hours by bank"), alias="")
    target["metrics"] = [*target["metrics"], {"id": "9", "type": "count"}]
    buckets = [{"key": T0, "doc_count": 4, "1": {"value": 12.5}}]
    response = _answers(target, {"aggregations": {"2": {"buckets": [
        {"key": "physics", "doc_count": 4, "1": {"value": 12.5},
         "3": {"buckets": buckets}}]}}})
    assert [_series(f)[:2] for f in frames_of(target, response)] == [
        ("physics Sum node_hours", {"bank": "physics"}), ("physics Count", {"bank": "physics"})]


def test_a_value_metric_with_an_alias_keeps_its_metric_id_label() -> None:
    # field_namer.go returns the alias before it drops the "metricId" label
    target = _target("Node-hours by bank")
    response = _answers(target, {"aggregations": {"2": {"buckets": [
        {"key": "physics", "doc_count": 4, "1": {"value": 12.5},
         "3": {"buckets": [{"key": T0, "doc_count": 4, "1": {"value": 12.5}}]}}]}}})
    (frame,) = frames_of(target, response)
    assert _series(frame)[:2] == ("physics", {"bank": "physics", "metricId": "1"})


def test_hidden_metrics_are_left_out_of_time_series() -> None:
    target = _target("Active users and banks, cancelled before start")
    target["metrics"] = [target["metrics"][0], {**target["metrics"][1], "hide": True}]
    response = {"aggregations": {"3": {"buckets": [
        {"key": T0, "doc_count": 5, "1": {"value": 3}, "2": {"value": 2}}]}}}
    frames = frames_of(target, response)
    assert [_series(f)[0] for f in frames] == ["Unique Count user"]


def test_trim_edges_drops_buckets_at_both_ends() -> None:
    target = _target("Job flow: submits, starts, ends")
    target["bucketAggs"] = [{**target["bucketAggs"][0], "settings": {
        **target["bucketAggs"][0]["settings"], "trimEdges": "1"}}]
    response = {"aggregations": {"2": {"buckets": [
        {"key": T0 + i * MINUTE, "doc_count": i} for i in range(4)]}}}
    (frame,) = frames_of(target, response)
    assert _series(frame)[2:] == ([T0 + MINUTE, T0 + 2 * MINUTE], [1.0, 2.0])


def test_empty_answers_give_what_grafana_gives() -> None:
    by_queue = _target("Queue depth by queue")
    assert frames_of(by_queue, {"aggregations": {"2": {"buckets": []}}}) == []
    flow = _target("Job flow: submits, starts, ends")
    (frame,) = frames_of(flow, {"aggregations": {"2": {"buckets": []}}})
    assert _series(frame) == ("submits", {}, [], [])
    percentiles = _target("Prolog and epilog duration")
    assert frames_of(percentiles, {"aggregations": {"3": {"buckets": []}}}) == []
    assert frames_of(flow, {"aggregations": {}}) == []  # nothing to walk
    table = _target("Top banks by consumption")
    assert frames_of(table, {"aggregations": {"4": {"buckets": []}}}) == []
    documents = _target("Job document")
    (frame,) = frames_of(documents, {"hits": {"total": {"value": 0}, "hits": []}})
    assert (frame.fields, frame.length) == ([], 0)


# --------------------------------------------------------------------------- tables


def test_nested_terms_table_has_a_column_per_level_then_per_metric() -> None:
    target = _target("Pending cores by user and bank")
    response = _answers(target, {"aggregations": {"4": {"buckets": [
        {"key": "physics", "doc_count": 3, "1": {"value": 96.0}, "5": {"buckets": [
            {"key": "alice", "doc_count": 2, "1": {"value": 64.0}, "2": {"value": 0.0}},
            {"key": "bob", "doc_count": 1, "1": {"value": 32.0}, "2": {"value": 4.0}}]}},
        {"key": "-", "doc_count": 1, "1": {"value": 8.0}, "5": {"buckets": [
            {"key": "carol", "doc_count": 1, "1": {"value": 8.0}, "2": {"value": None}}]}},
    ]}}})
    (frame,) = frames_of(target, response)
    assert _table(frame) == [("bank", FieldType.STRING), ("user", FieldType.STRING),
                             ("Sum cores_req", FieldType.NUMBER),
                             ("Sum gpus_req", FieldType.NUMBER), ("Count", FieldType.NUMBER)]
    assert frame.rows() == [["physics", "alice", 64.0, 0.0, 2.0],
                            ["physics", "bob", 32.0, 4.0, 1.0],
                            ["-", "carol", 8.0, None, 1.0]]


def test_a_metric_alone_of_its_type_is_named_by_the_type() -> None:
    target = _target("Pipeline freshness")
    response = _answers(target, {"aggregations": {"2": {"buckets": [
        {"key": "tioga", "doc_count": 10,
         "1": {"value": 1.7950008e12, "value_as_string": "2026-11-18T11:20:00.000Z"}}]}}})
    (frame,) = frames_of(target, response)
    assert frame.rows() == [["tioga", 1.7950008e12]]
    assert _table(frame)[1] == ("Max", FieldType.NUMBER)


def test_levels_above_the_last_are_columns_sorted_by_field_name() -> None:
    target = _target("Longest-waiting pending jobs")

    def level(field_id: str, key: str, inner: dict[str, Any]) -> dict[str, Any]:
        return {field_id: {"buckets": [{"key": key, "doc_count": 1, **inner}]}}

    leaf = {"1": {"value": 1.79e12}, "2": {"value": 1.7901e12}, "3": {"value": 2.0},
            "4": {"value": 64.0}, "5": {"value": 0.0}, "6": {"value": 3600.0}}
    answer = level("12", "Priority", leaf)
    for agg_id, key in (("11", "pbatch"), ("10", "physics"), ("9", "alice"),
                        ("8", "4242"), ("7", "tioga")):
        extra = {"1": {"value": 1.79e12}} if agg_id == "8" else {}
        answer = level(agg_id, key, {**answer, **extra})
    response = _answers(target, {"aggregations": answer})
    (frame,) = frames_of(target, response)
    assert [name for name, _ in _table(frame)] == [
        "bank", "cluster", "job_id", "queue", "user", "pending_reason", "Min t_submit",
        "Min t_eligible", "Max nodes_req", "Max cores_req", "Max gpus_req",
        "Max timelimit_s"]
    assert frame.rows() == [["physics", "tioga", "4242", "pbatch", "alice", "Priority",
                             1.79e12, 1.7901e12, 2.0, 64.0, 0.0, 3600.0]]


def test_percentiles_and_count_in_a_table() -> None:
    target = _target("Wait by queue and job size (p50/p90)")
    response = _answers(target, {"aggregations": {"3": {"buckets": [
        {"key": "pbatch", "doc_count": 5, "4": {"buckets": [
            {"key": "1 node", "doc_count": 4, "1": {"values": {"50.0": 30.0, "90.0": 300.0}}},
            {"key": "2-4 nodes", "doc_count": 1,
             "1": {"values": {"50.0": None, "90.0": None}}}]}}]}}})
    (frame,) = frames_of(target, response)
    assert [name for name, _ in _table(frame)] == [
        "queue", "size_bucket", "p50.0 wait_s", "p90.0 wait_s", "Count"]
    # MustFloat64: a percentile without a value is 0 in a table
    assert frame.rows() == [["pbatch", "1 node", 30.0, 300.0, 4.0],
                            ["pbatch", "2-4 nodes", 0.0, 0.0, 1.0]]


def test_filters_below_terms_give_a_filter_column_sorted_by_label() -> None:
    target = _target("Jobs under 10 % of their CPU or memory, by user")
    response = _answers(target, {"aggregations": {"4": {"buckets": [
        {"key": "alice", "doc_count": 3, "5": {"buckets": {
            "memory": {"doc_count": 1, "2": {"value": 1.0}, "3": {"value": 36.0}},
            "CPU": {"doc_count": 2, "2": {"value": 4.0}, "3": {"value": 144.0}}}}}]}}})
    (frame,) = frames_of(target, response)
    assert [name for name, _ in _table(frame)] == [
        "user", "filter", "Count", "Sum node_hours", "Sum core_hours"]
    assert frame.rows() == [["alice", "CPU", 2.0, 4.0, 144.0],
                            ["alice", "memory", 1.0, 1.0, 36.0]]


def test_histogram_table_has_numeric_keys() -> None:
    target = _target("Run time as a share of the time limit")
    response = _answers(target, {"aggregations": {"2": {"buckets": [
        {"key": 0.0, "doc_count": 4}, {"key": 10.0, "doc_count": 0},
        {"key": 90.0, "doc_count": 7}]}}})
    (frame,) = frames_of(target, response)
    assert _table(frame) == [("timelimit_used_pct", FieldType.NUMBER),
                             ("Count", FieldType.NUMBER)]
    assert frame.rows() == [[0.0, 4.0], [10.0, 0.0], [90.0, 7.0]]


def test_a_bucket_path_without_buckets_drops_the_table_as_grafana_does() -> None:
    # processAggregationDocs replaces the result by an empty one ("no buckets present")
    target = _target("Pending cores by user and bank")
    response = {"aggregations": {"4": {"buckets": [
        {"key": "physics", "doc_count": 1, "5": {"buckets": [
            {"key": "alice", "doc_count": 1, "1": {"value": 1.0}, "2": {"value": 0.0}}]}},
        {"key": "chem", "doc_count": 0, "5": {"buckets": []}}]}}}
    assert frames_of(target, response) == []


# --------------------------------------------------------------------------- documents


def _event_hit(seq: int, when: str, event: str) -> dict[str, Any]:
    return {"_index": "hpc-job-events-2026.11", "_id": f"tioga-4242-{seq}", "_score": None,
            "_source": {"@timestamp": when, "cluster": "tioga", "event": event,
                        "source": "flux", "seq": seq, "event_id": f"e{seq}",
                        "context": {"type": "cancel", "severity": 0}, "facts": {},
                        "ranks": [0, 1]},
            "fields": {"@timestamp": [when]}, "sort": [seq, 1_795_000_000_000 + seq]}


def test_raw_data_flattens_the_source_with_the_time_field_first() -> None:
    target = _target("Events")
    response = _answers(target, {"hits": {"total": {"value": 2, "relation": "eq"}, "hits": [
        _event_hit(1, "2026-11-19T07:46:40.123456789Z", "submit"),
        {**_event_hit(2, "2026-11-19T07:46:41Z", "exception"),
         "_source": {**_event_hit(2, "x", "exception")["_source"],
                     "@timestamp": "2026-11-19T07:46:41Z", "seq": "two"}}]}})
    (frame,) = frames_of(target, response)
    assert _table(frame) == [
        ("@timestamp", FieldType.TIME), ("_id", FieldType.STRING), ("_index", FieldType.STRING),
        ("_type", FieldType.OTHER), ("cluster", FieldType.STRING),
        ("context.severity", FieldType.NUMBER), ("context.type", FieldType.STRING),
        ("event", FieldType.STRING), ("event_id", FieldType.STRING),
        ("facts", FieldType.OTHER), ("highlight", FieldType.OTHER),
        ("ranks", FieldType.OTHER), ("seq", FieldType.NUMBER), ("sort", FieldType.OTHER),
        ("source", FieldType.STRING)]
    columns = {f.name: f.values for f in frame.fields}
    assert columns["@timestamp"] == [1_795_074_400_123, 1_795_074_401_000]
    assert columns["context.type"] == ["cancel", "cancel"]
    assert columns["facts"] == [{}, {}]  # an empty object stays one
    assert columns["seq"] == [1.0, None]  # the first value decides the type
    assert columns["_type"] == [None, None]
    assert columns["sort"] == [[1, 1_795_000_000_001], [2, 1_795_000_000_002]]


def test_raw_data_time_in_other_zones_and_unparsable() -> None:
    target = _target("Job document")
    hits = [{"_index": "hpc-jobs", "_id": str(i), "_source": {"job_id": str(i)},
             "fields": {"t_submit": [when]}}
            for i, when in enumerate(["2026-11-19T09:46:40+02:00", "yesterday"])]
    (frame,) = frames_of(target, {"hits": {"hits": hits}})
    assert frame.fields[0].name == "t_submit"
    assert frame.fields[0].values == [1_795_074_400_000, None]


def test_logs_put_time_and_message_first_and_keep_the_source_as_a_line() -> None:
    target = _target("Event timeline")
    hit = _event_hit(1, "2026-11-19T07:46:40Z", "submit")
    hit["highlight"] = {"event": ["@HIGHLIGHT@submit@/HIGHLIGHT@"]}
    response = _answers(target, {"hits": {"total": {"value": 1}, "hits": [hit]}})
    (frame,) = frames_of(target, response)
    names = [f.name for f in frame.fields]
    assert names[:4] == ["@timestamp", "event", "_id", "_index"]
    columns = {f.name: f.values for f in frame.fields}
    assert columns["id"] == ["hpc-job-events-2026.11#tioga-4242-1"]
    assert columns["_source"] == [
        '{"@timestamp":"2026-11-19T07:46:40Z","cluster":"tioga","context.severity":0,'
        '"context.type":"cancel","event":"submit","event_id":"e1","facts":{},'
        '"ranks":[0,1],"seq":1,"source":"flux"}']
    assert frame.meta == {"preferredVisualisationType": "logs", "custom": {
        "searchWords": ["submit"], "limit": 500, "total": 1}}


def test_raw_document_is_one_column_of_documents() -> None:
    target = {**_target("Job document"), "metrics": [{"id": "1", "type": "raw_document"}]}
    hit = {"_index": "hpc-jobs", "_id": "a", "_source": {"job": {"id": "7"}}}
    (frame,) = frames_of(target, {"hits": {"hits": [hit]}})
    assert (frame.name, _table(frame)) == ("A", [("A", FieldType.OTHER)])
    assert frame.fields[0].values == [{"_id": "a", "_type": None, "_index": "hpc-jobs",
                                       "sort": None, "highlight": None, "job": {"id": "7"}}]


def test_an_error_item_and_unmirrored_metrics_raise() -> None:
    target = _target("Top banks by consumption")
    with pytest.raises(FrameError, match="no such index"):
        frames_of(target, {"error": {"root_cause": [{"reason": "no such index [x]"}]},
                           "status": 404})
    stats = {**target, "metrics": [{"id": "1", "type": "extended_stats", "field": "x"}]}
    with pytest.raises(FrameError, match="extended_stats"):
        frames_of(stats, {"aggregations": {"4": {"buckets": [
            {"key": "a", "doc_count": 1, "1": {"avg": 1.0}}]}}})
