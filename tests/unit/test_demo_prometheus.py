"""The demo's Prometheus (issue 36): asked for, with the worker's and sink's metrics ports,
only when it is built; what it saw read from its API answers and reported."""

from __future__ import annotations

import io
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from pipeline.runtime.config import Config
from pipeline.runtime.errors import ServiceError
from pipeline.tooling.demo_prometheus import JOBS, PrometheusSeen, observe, samples, with_prometheus
from pipeline.tooling.demo_view import prometheus_report
from pipeline.tooling.stack.prometheus import VERSION


def _console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=200), out


def _cfg(tmp_path: Path, **metrics: Any) -> Config:
    return Config().replace(stack={"cache_dir": str(tmp_path)}, metrics=metrics)


def test_without_a_built_prometheus_the_demo_says_so_and_goes_on(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    console, out = _console()
    assert with_prometheus(cfg, console) == cfg
    assert out.getvalue().count("Prometheus is not built") == 1


def test_a_built_prometheus_is_asked_for_with_the_processes_ports(tmp_path: Path) -> None:
    bin_dir = tmp_path / "prometheus" / VERSION / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("prometheus", "promtool"):
        (bin_dir / name).write_text("")
    console, out = _console()
    got = with_prometheus(_cfg(tmp_path, sink_port=9402), console)
    assert got.stack.prometheus
    assert got.metrics.sink_port == 9402  # the config's own port is kept
    assert got.metrics.worker_port > 0
    assert out.getvalue() == ""


def _vector(*items: tuple[Mapping[str, str], float]) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": dict(labels), "value": [1.8e9, str(value)]} for labels, value in items]}}


class _FakePrometheus:
    """Answers the demo's questions: ``up`` per job, the worker's records, the alerts."""

    url = "http://prometheus.test"

    def __init__(self, up: Mapping[str, float], records: float | None,
                 alerts: list[dict[str, str]]) -> None:
        self.up, self.records, self.alerts = up, records, alerts
        self.queries: list[str] = []

    def query(self, path: str, params: Mapping[str, str]) -> dict[str, Any]:
        assert path == "/api/v1/query"
        q = params["query"]
        self.queries.append(q)
        if q.startswith("max_over_time(up"):
            return _vector(*(({"job": job}, v) for job, v in self.up.items()))
        if "jobstream_worker_records_read_total" in q:
            return _vector(({}, self.records)) if self.records is not None else _vector()
        if q.startswith("ALERTS"):
            return _vector(*((labels, 1.0) for labels in self.alerts))
        return {"status": "error", "errorType": "bad_data", "error": f"unexpected {q}"}


def _observe(prom: _FakePrometheus, tmp_path: Path) -> PrometheusSeen:
    cfg = _cfg(tmp_path, worker_port=9401, sink_port=9402)
    return observe(prom, cfg, started_at=0.0, flow_ended_at=0.0,  # type: ignore[arg-type]
                   wait_s=0.0)


def test_what_prometheus_saw_of_a_healthy_demo(tmp_path: Path) -> None:
    prom = _FakePrometheus({"jobstream-worker": 1, "jobstream-sink": 1}, 1200.0, [])
    seen = _observe(prom, tmp_path)
    assert seen.scraped == {"jobstream-worker": True, "jobstream-sink": True}
    assert seen.records_read == 1200.0 and seen.firing == [] and not seen.error
    assert seen.rate == pytest.approx(1200.0 / seen.window_s)
    # the scrape jobs asked for are the demo's two processes
    assert 'up{job=~"jobstream-worker|jobstream-sink"}' in prom.queries[0]
    text = _render(seen)
    assert "✓ jobstream-worker scraped, ✓ jobstream-sink scraped" in text
    assert re.search(r"the worker read 1200 raw records \([\d.]+/s\)", text)
    assert "alerts firing: none" in text


def test_a_process_never_scraped_and_an_alert_firing_are_said(tmp_path: Path) -> None:
    prom = _FakePrometheus({"jobstream-worker": 1, "jobstream-sink": 0}, None,
                           [{"alertname": "JobstreamConsumerLagGrowing",
                             "job": "jobstream-worker"}])
    seen = _observe(prom, tmp_path)
    assert seen.scraped == {"jobstream-worker": True, "jobstream-sink": False}
    assert seen.firing == ["JobstreamConsumerLagGrowing (jobstream-worker)"]
    text = _render(seen)
    assert "✗ jobstream-sink never scraped up" in text
    assert "alerts firing: JobstreamConsumerLagGrowing (jobstream-worker)" in text
    assert "the worker read" not in text


def test_a_prometheus_that_was_started_with_other_ports_is_said(tmp_path: Path) -> None:
    seen = _observe(_FakePrometheus({}, None, []), tmp_path)
    assert seen.scraped == {}
    assert "jobstream-worker not a target" in _render(seen)


def test_an_error_answer_is_reported_not_raised(tmp_path: Path) -> None:
    class Refusing(_FakePrometheus):
        def query(self, path: str, params: Mapping[str, str]) -> dict[str, Any]:
            return {"status": "error", "errorType": "bad_data", "error": "parse error"}

    seen = _observe(Refusing({}, None, []), tmp_path)
    assert "bad_data: parse error" in seen.error
    assert "no answer: Prometheus refused a query" in _render(seen)
    with pytest.raises(ServiceError, match="parse error"):
        samples({"status": "error", "errorType": "bad_data", "error": "parse error"})


def _render(seen: PrometheusSeen) -> str:
    console, out = _console()
    console.print(prometheus_report(seen, JOBS))
    return out.getvalue()
