"""A real Prometheus (the one ``./run`` builds) on the stack's generated config, scraping
this process's metrics port as the worker's: the config loads, the shipped alert rules are
loaded and evaluated, and ``dashboards check`` runs the pipeline dashboard's PromQL panels
against it (none broken; those whose metrics this process has are ok), while an
expression Prometheus refuses makes its panel broken."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from elasticsearch import Elasticsearch
from prometheus_bin import running_prometheus
from waiting import wait_until

from pipeline.cli import main
from pipeline.dashboards import health, render
from pipeline.dashboards.builder import prom_target
from pipeline.dashboards.check import Checker, PanelReport, Status, panels_of
from pipeline.dashboards.datasources import PROMETHEUS
from pipeline.dashboards.grafana_time import TimeRange
from pipeline.dashboards.promql import Prometheus
from pipeline.runtime import metrics
from pipeline.runtime.children import free_port
from pipeline.runtime.config import Config
from pipeline.tooling.stack.prometheus import RULES, scrape_config

pytestmark = pytest.mark.integration


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 (loopback)
        return json.load(resp)


def _scraped(url: str) -> bool:
    try:
        result = _get(f"{url}/api/v1/query?query=up")["data"]["result"]
    except OSError:
        return False
    return any(r["metric"].get("job") == "jobstream-worker" and r["value"][1] == "1"
               for r in result)


@pytest.fixture(scope="module")
def prometheus_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("prometheus")
    cfg = Config().replace(metrics={"worker_port": free_port()})
    server = metrics.start(cfg, "worker")
    assert server is not None
    rules = root / "jobstream-rules.yml"
    rules.write_text(RULES.read_text())
    try:
        with running_prometheus(root, scrape_config(cfg, rules, interval="1s")) as url:
            wait_until(lambda: _scraped(url), timeout=60,
                       what="Prometheus scraping the worker's port")
            yield url
    finally:
        server.shutdown()
        server.server_close()


def _checker(url: str) -> Checker:
    # the pipeline dashboard has no Elasticsearch target: this client is never asked
    return Checker(Elasticsearch("http://127.0.0.1:9"), prometheus=Prometheus(url))


def _last_minutes(minutes: int) -> TimeRange:
    now = int(time.time() * 1000)
    return TimeRange(now - minutes * 60_000, now)


def test_the_shipped_rules_are_loaded_and_evaluated(prometheus_url: str) -> None:
    shipped = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"]
               for r in g["rules"]}

    def evaluated() -> bool:
        groups = _get(f"{prometheus_url}/api/v1/rules")["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        return {r["name"] for r in rules} == shipped and \
            all(r["health"] == "ok" for r in rules)

    wait_until(evaluated, timeout=30, what="every shipped rule evaluated without error")


def test_the_pipeline_dashboards_promql_panels_run(prometheus_url: str) -> None:
    reports: list[PanelReport] = []

    def memory_shown() -> bool:
        # a range query ends at the last step boundary (15 s) before now, as Grafana's: a
        # Prometheus started seconds ago has no sample there yet
        reports[:] = _checker(prometheus_url).check([health.build()], _last_minutes(5))
        memory = next(r for r in reports if r.title == "Resident memory")
        return memory.status is Status.OK

    wait_until(memory_shown, timeout=60, interval=2.0,
               what="the memory panel showing this process's memory")
    assert len(reports) == len([p for p in panels_of(health.build()) if p.get("targets")])
    broken = [(r.title, r.detail) for r in reports if r.status is Status.BROKEN]
    assert not broken
    memory = next(r for r in reports if r.title == "Resident memory")
    assert memory.targets[0].series == 1, memory


def test_an_expression_prometheus_refuses_breaks_its_panel(prometheus_url: str) -> None:
    board = {"title": "bad", "panels": [
        {"id": 1, "type": "timeseries", "title": "bad", "datasource": PROMETHEUS,
         "targets": [prom_target(PROMETHEUS, "A", "rate(jobstream_dlq_records_total[")]}]}
    [report] = _checker(prometheus_url).check([board], _last_minutes(5))
    assert report.status is Status.BROKEN
    assert report.targets[0].reason == "promql-error"
    assert "parse error" in report.targets[0].detail


def test_dashboards_check_runs_the_promql_panels_when_a_prometheus_is_configured(
        prometheus_url: str) -> None:
    board = str(render.GRAFANA_DIR / "dashboards" / "jobstream-pipeline.json")
    args = ["dashboards", "check", "--dashboard", board, "--from", "now-5m", "--json"]
    with_url = CliRunner().invoke(main, args,
                                  env={"JOBSTREAM_METRICS__PROMETHEUS_URL": prometheus_url})
    assert with_url.exit_code == 0, with_url.output
    report = json.loads(with_url.output)
    assert report["prometheus_url"] == prometheus_url
    assert len(report["panels"]) == 12 and report["summary"]["broken"] == 0
    without = CliRunner().invoke(main, args, env={"JOBSTREAM_METRICS__PROMETHEUS_URL": ""})
    assert without.exit_code == 0, without.output
    assert json.loads(without.output)["panels"] == []  # left aside, as before
