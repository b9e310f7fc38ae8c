"""The request Grafana's Elasticsearch data source sends for a query-builder target.

Expected bodies are written by hand from the references: the ``_msearch`` body of
services.md section 2.7 (Grafana's ``metric_simple`` fixture) and panels of
dashboards.md section 5.2.
"""

from __future__ import annotations

import pytest

from pipeline.dashboards.grafana_query import (
    build_search,
    clamp_auto_interval_ms,
    substitute,
    variable_values,
)
from pipeline.dashboards.grafana_time import (
    QueryError,
    TimeRange,
    auto_interval_ms,
    go_duration,
    parse_duration_ms,
    parse_time,
    round_interval_ms,
)

FROM, TO = 1_795_000_000_000, 1_795_021_600_000  # six hours
RANGE = TimeRange(FROM, TO)


def _range(field: str) -> dict:
    return {"range": {field: {"gte": FROM, "lte": TO, "format": "epoch_millis"}}}


def test_terms_date_histogram_avg_percentiles_as_in_services_md() -> None:
    target = {
        "refId": "A", "query": "event:start",
        "metrics": [{"id": "1", "type": "avg", "field": "x"},
                    {"id": "4", "type": "percentiles", "field": "x",
                     "settings": {"percents": ["50", "95"]}}],
        "bucketAggs": [
            {"id": "3", "type": "terms", "field": "label",
             "settings": {"size": "10", "min_doc_count": "1", "order": "desc",
                          "orderBy": "_key"}},
            {"id": "2", "type": "date_histogram", "field": "@timestamp",
             "settings": {"interval": "1m", "min_doc_count": "0"}},
        ],
    }
    header, body = build_search(target, index="hpc-job-events", time_field="@timestamp",
                                time_range=RANGE, interval_ms=60_000)
    assert header == {"search_type": "query_then_fetch", "ignore_unavailable": True,
                      "index": "hpc-job-events"}
    assert body == {
        "size": 0,
        "query": {"bool": {"filter": [
            _range("@timestamp"),
            {"query_string": {"analyze_wildcard": True, "query": "event:start"}}]}},
        "aggs": {"3": {
            "terms": {"field": "label", "size": 10, "min_doc_count": 1,
                      "order": {"_key": "desc"}},
            "aggs": {"2": {
                "date_histogram": {"field": "@timestamp", "fixed_interval": "1m",
                                   "min_doc_count": 0,
                                   "extended_bounds": {"min": FROM, "max": TO},
                                   "format": "epoch_millis"},
                "aggs": {"1": {"avg": {"field": "x"}},
                         "4": {"percentiles": {"field": "x", "percents": ["50", "95"]}}},
            }},
        }},
    }


def test_queue_depth_ordered_by_its_metric_with_an_auto_interval() -> None:
    # dashboards.md panel 1: avg(pending_jobs) . terms(queue, size 20, order by avg desc)
    # -> date_histogram(auto, min 30s); no query, so the range is the only filter.
    target = {
        "refId": "A", "query": "",
        "metrics": [{"id": "1", "type": "avg", "field": "pending_jobs"}],
        "bucketAggs": [
            {"id": "2", "type": "terms", "field": "queue",
             "settings": {"size": "20", "order": "desc", "orderBy": "1"}},
            {"id": "3", "type": "date_histogram", "field": "timestamp",
             "settings": {"interval": "auto"}},
        ],
    }
    interval = auto_interval_ms(RANGE.span_ms, "30s")
    assert interval == 30_000  # 6 h / 1000 points = 21.6 s -> 20 s, raised to the 30 s min
    _, body = build_search(target, index="hpc-queue-snapshots", time_field="timestamp",
                           time_range=RANGE, interval_ms=interval)
    assert body == {
        "size": 0,
        "query": {"bool": {"filter": _range("timestamp")}},
        "aggs": {"2": {
            "terms": {"field": "queue", "size": 20, "order": {"1": "desc"}},
            "aggs": {
                # Grafana puts the ordering metric beside the next level, without settings
                "1": {"avg": {"field": "pending_jobs"}},
                "3": {"date_histogram": {"field": "timestamp", "fixed_interval": "30000ms",
                                         "min_doc_count": 0,
                                         "extended_bounds": {"min": FROM, "max": TO},
                                         "format": "epoch_millis"},
                      "aggs": {"1": {"avg": {"field": "pending_jobs"}}}},
            },
        }},
    }


def test_job_flow_filters_by_minute_with_count_only() -> None:
    # dashboards.md panel 5: filters {submit, start, end} -> date_histogram(1m) . count
    target = {
        "refId": "A", "query": "cluster:a",
        "metrics": [{"id": "1", "type": "count"}],
        "bucketAggs": [
            {"id": "2", "type": "filters", "settings": {"filters": [
                {"query": "event:submit", "label": "submits"},
                {"query": "event:start", "label": ""}]}},
            {"id": "3", "type": "date_histogram", "settings": {"interval": "1m"}},
        ],
    }
    _, body = build_search(target, index="e", time_field="@timestamp", time_range=RANGE,
                           interval_ms=60_000)
    assert body["aggs"] == {"2": {
        "filters": {"filters": {
            "submits": {"query_string": {"query": "event:submit", "analyze_wildcard": True}},
            "event:start": {"query_string": {"query": "event:start",
                                             "analyze_wildcard": True}}}},
        "aggs": {"3": {"date_histogram": {
            "field": "@timestamp", "fixed_interval": "1m", "min_doc_count": 0,
            "extended_bounds": {"min": FROM, "max": TO}, "format": "epoch_millis"}}},
    }}


def test_count_by_term_orders_by_count_and_adds_no_metric() -> None:
    target = {"metrics": [{"id": "1", "type": "count"}],
              "bucketAggs": [{"id": "2", "type": "terms", "field": "result",
                              "settings": {"size": "0", "orderBy": "1"}}]}
    _, body = build_search(target, index="j", time_field="t_end", time_range=RANGE,
                           interval_ms=1000)
    # size 0 is "no limit" in the editor, 500 in the request; no order direction -> desc
    assert body["aggs"] == {"2": {"terms": {"field": "result", "size": 500,
                                            "order": {"_count": "desc"}}}}


def test_terms_without_order_options_are_ordered_by_term_value_desc() -> None:
    # aggregation_factory.go: no orderBy means the editor's default, "_term" desc, which
    # aggregation_builder.go sends as "_key"; the direction given is kept
    for settings, order in (({"size": "5"}, {"_key": "desc"}),
                            ({"size": "5", "orderBy": "", "order": "asc"}, {"_key": "asc"}),
                            ({"size": "5", "orderBy": "_term", "order": "asc"}, {"_key": "asc"})):
        target = {"metrics": [{"id": "1", "type": "count"}],
                  "bucketAggs": [{"id": "2", "type": "terms", "field": "queue",
                                  "settings": settings}]}
        _, body = build_search(target, index="j", time_field="t_end", time_range=RANGE,
                               interval_ms=1000)
        assert body["aggs"]["2"]["terms"]["order"] == order


WEEK = TimeRange(1_525_801_800_000, 1_526_406_600_000)  # 2018-05-08 .. 05-15 17:50 UTC


def _terms_then_auto(size: object, interval: str = "auto") -> list[dict]:
    return [{"id": "2", "type": "terms", "field": "host", "settings": {"size": size}},
            {"id": "3", "type": "date_histogram", "field": "t", "settings": {"interval": interval}}]


@pytest.mark.parametrize(("buckets", "time_range", "interval", "expected"), [
    # the cases of the plugin's auto_interval_test.go (TestClampAutoIntervalToMaxBuckets)
    (_terms_then_auto("0"), WEEK, 10_000, 7_200_000),        # 500 terms: 2 h
    (_terms_then_auto("5"), TimeRange(WEEK.to_ms - 300_000, WEEK.to_ms), 10_000, 10_000),
    (_terms_then_auto("0")[1:], WEEK, 10_000, 10_000),        # no terms above
    (_terms_then_auto("0", "10s"), WEEK, 10_000, 10_000),     # explicit interval
    (_terms_then_auto("0", "1M"), WEEK, 10_000, 10_000),      # calendar interval
    ([*_terms_then_auto("0")[:1], {"id": "4", "type": "terms", "field": "i",
                                   "settings": {"size": "0"}}, *_terms_then_auto("0")[1:]],
     WEEK, 10_000, 10_000),                                   # no interval can help
    (_terms_then_auto("0"), WEEK, 0, 7_200_000),              # zero interval
    (_terms_then_auto("5"), TimeRange(WEEK.to_ms - 300_000, WEEK.to_ms), 0, 0),
    (_terms_then_auto(100), WEEK, 10_000, 1_800_000),         # numeric size: 30 min
    ([{"id": "2", "type": "filters", "settings": {"filters": [
        {"query": "a"}, {"query": "b"}, {"query": "c"}, {"query": "d"}]}},
      {"id": "3", "type": "date_histogram", "settings": {"interval": "auto"}}],
     TimeRange(1_523_814_600_000, 1_526_406_600_000), 10_000, 300_000),  # 4 filters, 30 d
])
def test_auto_interval_widened_to_the_bucket_limit(buckets: list, time_range: TimeRange,
                                                   interval: int, expected: int) -> None:
    assert clamp_auto_interval_ms(buckets, time_range, interval) == expected


def test_widened_interval_reaches_the_request() -> None:
    target = {"metrics": [{"id": "1", "type": "count"}], "bucketAggs": _terms_then_auto("0")}
    _, body = build_search(target, index="j", time_field="t", time_range=WEEK,
                           interval_ms=10_000)
    assert body["aggs"]["2"]["aggs"]["3"]["date_histogram"]["fixed_interval"] == "7200000ms"


def test_histogram_and_calendar_interval() -> None:
    target = {"metrics": [{"id": "1", "type": "count"}],
              "bucketAggs": [{"id": "2", "type": "histogram", "field": "run_s",
                              "settings": {"interval": "10", "min_doc_count": "1"}},
                             {"id": "3", "type": "date_histogram", "field": "t_end",
                              "settings": {"interval": "1w", "timeZone": "Europe/Paris"}}]}
    _, body = build_search(target, index="j", time_field="t_end", time_range=RANGE,
                           interval_ms=1000)
    hist = body["aggs"]["2"]
    assert hist["histogram"] == {"field": "run_s", "interval": 10.0, "min_doc_count": 1}
    assert hist["aggs"]["3"]["date_histogram"]["calendar_interval"] == "1w"
    assert hist["aggs"]["3"]["date_histogram"]["time_zone"] == "Europe/Paris"
    assert "fixed_interval" not in hist["aggs"]["3"]["date_histogram"]


def test_raw_data_longest_waiting_pending_jobs() -> None:
    # dashboards.md panel 12: raw data, query state:pending, size 50 (shape of Grafana's
    # raw_data.request.line1.json fixture)
    target = {"query": "state:pending",
              "metrics": [{"id": "1", "type": "raw_data", "settings": {"size": "50"}}],
              "bucketAggs": []}
    _, body = build_search(target, index="hpc-jobs", time_field="t_submit", time_range=RANGE,
                           interval_ms=60_000)
    assert body == {
        "size": 50,
        "query": {"bool": {"filter": [
            _range("t_submit"),
            {"query_string": {"query": "state:pending", "analyze_wildcard": True}}]}},
        # Grafana's sort is a Go map, written with sorted keys: "_doc" < "t_submit", and
        # Elasticsearch applies a sort object's keys in order (see _sort)
        "sort": {"_doc": {"order": "desc"},
                 "t_submit": {"order": "desc", "unmapped_type": "boolean"}},
        "docvalue_fields": ["t_submit"],
        "script_fields": {},
        "fields": [{"field": "t_submit", "format": "strict_date_optional_time_nanos"}],
    }
    assert list(body["sort"]) == ["_doc", "t_submit"]


def test_logs_query_has_a_volume_histogram_and_highlight() -> None:
    target = {"query": "job_id:42", "metrics": [{"id": "1", "type": "logs"}]}
    _, body = build_search(target, index="ev", time_field="@timestamp", time_range=RANGE,
                           interval_ms=20_000)
    assert body["size"] == 500
    # "@" sorts before "_": on @timestamp, Grafana's sort really is newest first
    assert list(body["sort"]) == ["@timestamp", "_doc"]
    assert body["sort"]["@timestamp"] == {"order": "desc", "unmapped_type": "boolean"}
    assert body["highlight"]["pre_tags"] == ["@HIGHLIGHT@"]
    assert body["aggs"] == {"1": {"date_histogram": {
        "field": "@timestamp", "fixed_interval": "20000ms", "min_doc_count": 0,
        "extended_bounds": {"min": FROM, "max": TO}, "format": "epoch_millis"}}}


def test_pipeline_metrics_point_at_their_source() -> None:
    target = {"metrics": [{"id": "1", "type": "count"},
                          {"id": "2", "type": "sum", "field": "node_hours"},
                          {"id": "3", "type": "cumulative_sum", "field": "2"},
                          {"id": "4", "type": "derivative", "field": "1"},
                          {"id": "5", "type": "bucket_script",
                           "pipelineVariables": [{"name": "a", "pipelineAgg": "2"},
                                                 {"name": "c", "pipelineAgg": "1"}],
                           "settings": {"script": "params.a / params.c"}}],
              "bucketAggs": [{"id": "6", "type": "date_histogram", "field": "t_end"}]}
    _, body = build_search(target, index="j", time_field="t_end", time_range=RANGE,
                           interval_ms=60_000)
    leaf = body["aggs"]["6"]["aggs"]
    assert leaf["3"] == {"cumulative_sum": {"buckets_path": "2"}}
    assert leaf["4"] == {"derivative": {"buckets_path": "_count"}}
    assert leaf["5"] == {"bucket_script": {"buckets_path": {"a": "2", "c": "_count"},
                                           "script": "params.a / params.c"}}


def test_a_metric_query_without_buckets_is_refused_like_grafana() -> None:
    with pytest.raises(QueryError, match="missing metrics and aggregations"):
        build_search({"metrics": [{"id": "1", "type": "max", "field": "updated_at"}]},
                     index="j", time_field="t", time_range=RANGE, interval_ms=1000)


def test_variables_become_all_or_their_current_value() -> None:
    board = {"templating": {"list": [
        {"name": "cluster", "type": "query", "includeAll": True, "allValue": "* OR *:*"},
        {"name": "queue", "type": "query", "includeAll": True},
        {"name": "limit", "type": "custom", "current": {"value": "60"}},
        {"name": "job_id", "type": "textbox", "current": {"value": "*"}},
    ]}}
    values = variable_values(board)
    assert values == {"cluster": "* OR *:*", "queue": "*", "limit": "60", "job_id": "*"}
    target = {"query": "(cluster:$cluster) AND queue:${queue:lucene} AND run_s:<[[limit]] "
                       "AND job_id:$job_id AND $cluster_name",
              "expression": "$A / $B"}
    assert substitute(target, values) == {
        "query": "(cluster:* OR *:*) AND queue:* AND run_s:<60 AND job_id:* AND $cluster_name",
        "expression": "$A / $B"}


@pytest.mark.parametrize(("raw", "rounded"), [
    (8, 1), (21_600, 20_000), (86_400, 60_000), (604_800, 600_000), (5_000_000, 3_600_000),
    (10**12, 31_536_000_000)])
def test_round_interval(raw: int, rounded: int) -> None:
    assert round_interval_ms(raw) == rounded


def test_times_and_durations() -> None:
    now = 1_795_000_000_000
    assert parse_time("now", now) == now
    assert parse_time("now-24h", now) == now - 86_400_000
    assert parse_time("now-7d", now) == now - 7 * 86_400_000
    assert parse_time("1795000000000", now) == 1_795_000_000_000
    assert parse_time("2026-11-22T00:00:00Z", now) == 1_795_305_600_000
    for bad in ("yesterday", "2026-11-22T00:00:00"):
        with pytest.raises(QueryError):
            parse_time(bad, now)
    assert parse_duration_ms("30d") == 30 * 86_400_000
    with pytest.raises(QueryError):
        parse_duration_ms("soon")
    assert [go_duration(ms) for ms in (500, 30_000, 60_000, 3_600_000, 5_400_500)] == \
        ["500ms", "30s", "1m0s", "1h0m0s", "1h30m0.5s"]
