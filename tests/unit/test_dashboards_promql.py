"""The Prometheus targets of a dashboard as Grafana sends them (pipeline.dashboards.promql):
its variables, the request of a range and of an instant target, and the answer read."""

from __future__ import annotations

from pipeline.dashboards.check import PanelReport, Status, TargetReport
from pipeline.dashboards.grafana_time import TimeRange
from pipeline.dashboards.promql import Answer, expand, read_answer, request

HOUR_MS = 3_600_000


def test_rate_interval_holds_four_scrapes_or_one_step_and_a_scrape() -> None:
    expr = "rate(x[$__rate_interval]) / ${__interval} + $__range_s"
    assert expand(expr, interval_ms=15_000, range_ms=HOUR_MS) == "rate(x[60s]) / 15s + 3600"
    assert expand(expr, interval_ms=120_000, range_ms=HOUR_MS) == \
        "rate(x[135s]) / 120s + 3600"


def test_a_variable_grafana_does_not_have_is_left_for_prometheus_to_refuse() -> None:
    assert expand("x[$__nothing]", interval_ms=15_000, range_ms=HOUR_MS) == "x[$__nothing]"


def test_a_range_target_asks_query_range_with_a_step_of_at_least_the_scrape() -> None:
    span = TimeRange(1_700_000_003_000, 1_700_000_003_000 + HOUR_MS)
    path, params = request({"expr": "up", "range": True, "instant": False}, span)
    assert path == "/api/v1/query_range"
    assert params["step"] == "15"  # an hour over 1000 points is 5 s: the scrape wins
    assert float(params["start"]) % 15 == 0 and float(params["end"]) % 15 == 0
    day = TimeRange(0, 24 * HOUR_MS)
    _, params = request({"expr": "rate(x[$__rate_interval])", "range": True}, day)
    assert params["step"] == "60" and params["query"] == "rate(x[75s])"


def test_an_instant_target_asks_query_at_the_end() -> None:
    span = TimeRange(0, HOUR_MS)
    path, params = request({"expr": "up", "range": False, "instant": True}, span)
    assert (path, params) == ("/api/v1/query", {"query": "up", "time": "3600.000"})


def test_the_answer_is_an_error_no_series_or_series() -> None:
    assert read_answer({"status": "error", "errorType": "bad_data",
                        "error": "1:5: parse error"}) == Answer(error="bad_data: 1:5: parse error")
    assert read_answer({"status": "success",
                        "data": {"resultType": "matrix", "result": []}}) == Answer()
    assert read_answer({"status": "success", "data": {"resultType": "vector",
                                                      "result": [{}, {}]}}) == Answer(series=2)


def test_a_panel_says_how_many_series_and_documents_it_found() -> None:
    report = PanelReport("d", 1, "p", Status.OK, [
        TargetReport("A", "jobstream-prometheus", Status.OK, series=3),
        TargetReport("B", "jobstream-prometheus", Status.EMPTY, series=0)])
    assert report.detail == "2 queries, 3 series"
    report.targets.append(TargetReport("C", "es", Status.OK, hits=7))
    assert report.detail == "3 queries, 7 documents, 3 series"
