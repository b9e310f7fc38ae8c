"""The "jobstream pipeline" dashboard: Prometheus panels over the metrics pipeline.runtime.metrics
defines, provisioned beside the Elasticsearch ones, and left alone by ``dashboards check``."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml
from prometheus_client import REGISTRY

import pipeline.runtime.metrics  # noqa: F401 - registers the jobstream metrics
from pipeline.dashboards import health, render
from pipeline.dashboards.check import Checker, Status
from pipeline.dashboards.datasources import PROMETHEUS
from pipeline.dashboards.grafana_time import TimeRange

BOARD = health.build()


def _targets(board: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(p, t) for p in board["panels"] for t in p.get("targets", [])]


def _exposed_names() -> set[str]:
    """Every sample name the registry exposes (``_total``, ``_bucket`` and all)."""
    names = set()
    for family in REGISTRY.collect():
        names.add(family.name)
        names.update(s.name for s in family.samples)
        if family.type == "counter":
            names.add(family.name + "_total")
        if family.type == "histogram":
            names.update(family.name + s for s in ("_bucket", "_sum", "_count"))
    return names


def test_it_is_generated_and_provisioned_with_its_prometheus_data_source() -> None:
    files = render.files()
    assert json.loads(files[f"dashboards/{health.UID}.json"]) == BOARD
    prov = yaml.safe_load(files["provisioning/datasources/prometheus.yaml"])
    (source,) = prov["datasources"]
    assert source["type"] == "prometheus" and source["uid"] == PROMETHEUS["uid"]
    assert source["url"] == "${PROMETHEUS_URL}"
    assert (render.GRAFANA_DIR / "provisioning/datasources/prometheus.yaml").read_text() \
        == files["provisioning/datasources/prometheus.yaml"]


def test_every_panel_reads_prometheus_and_only_metrics_jobstream_defines() -> None:
    exposed = _exposed_names()
    seen = set()
    for p, t in _targets(BOARD):
        assert t["datasource"] == PROMETHEUS, p["title"]
        assert p["datasource"] == PROMETHEUS, p["title"]
        for name in re.findall(r"\b(jobstream_[a-z_]+)", t["expr"]):
            assert name in exposed, (p["title"], name)
            seen.add(name)
    # the list: flow, DLQ by reason, spool, lag, bulk latency and rejections,
    # watchdog stalls, last event time
    for wanted in ("jobstream_edge_records_published_total", "jobstream_worker_events_folded_total",
                   "jobstream_dlq_records_total", "jobstream_spool_depth",
                   "jobstream_spool_oldest_age_seconds", "jobstream_consumer_lag",
                   "jobstream_sink_bulk_seconds_bucket", "jobstream_sink_bulk_items_total",
                   "jobstream_watchdog_stalls_total", "jobstream_last_event_timestamp_seconds"):
        assert wanted in seen, wanted


def test_panels_have_unique_ids_and_do_not_overlap() -> None:
    panels = BOARD["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells: set[tuple[int, int]] = set()
    for p in panels:
        pos = p["gridPos"]
        assert pos["x"] + pos["w"] <= 24
        mine = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"])
                for y in range(pos["y"], pos["y"] + pos["h"])}
        assert not mine & cells, p["title"]
        cells |= mine


class _NoElasticsearch:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the check asked Elasticsearch ({name}) about a Prometheus panel")


def test_dashboards_check_skips_prometheus_panels_and_still_checks_the_others() -> None:
    checker = Checker(_NoElasticsearch(), now_ms=1_800_000_000_000)  # type: ignore[arg-type]
    span = TimeRange(1_799_990_000_000, 1_800_000_000_000)
    assert checker.check([BOARD], span) == []
    # an Elasticsearch target beside them is still checked (here: an unknown data source)
    mixed = json.loads(json.dumps(BOARD))
    mixed["panels"][1]["targets"].append({"refId": "Z", "datasource": {
        "type": "elasticsearch", "uid": "no-such-source"}, "metrics": [], "bucketAggs": []})
    (report,) = checker.check([mixed], span)
    assert report.status is Status.BROKEN
    assert [t.ref_id for t in report.targets] == ["Z"]
