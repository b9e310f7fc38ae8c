"""The "jobstream pipeline" dashboard: the processes' own metrics (pipeline.runtime.metrics),
read through Prometheus. Where the overview shows the clusters, this one shows whether
jobstream keeps up with them: flow through each stage, lag, spools, dead letters,
Elasticsearch's answers, the watchdog, and how fresh each cluster's newest event is.
"""

from __future__ import annotations

from typing import Any

from pipeline.dashboards.builder import Grid, dashboard, panel, prom_target, row
from pipeline.dashboards.datasources import PROMETHEUS

__all__ = ["UID", "build"]

UID = "jobstream-pipeline"

_RATE = "[$__rate_interval]"


def _q(ref: str, expr: str, legend: str = "") -> dict[str, Any]:
    return prom_target(PROMETHEUS, ref, expr, legend=legend)


def build() -> dict[str, Any]:
    grid = Grid()
    grid.add(row("Flow"))
    grid.add(
        panel("timeseries", "Edges: records received and published", [
            _q("A", f"sum by (edge, cluster) (rate(jobstream_edge_records_received_total{_RATE}))",
               "received {{edge}} {{cluster}}"),
            _q("B", "sum by (edge, cluster) "
                    f"(rate(jobstream_edge_records_published_total{_RATE}))",
               "published {{edge}} {{cluster}}"),
        ], w=8, h=8, unit="reqps",
            description="Records each edge took from its scheduler (spooled) and those Kafka "
                        "confirmed. Received above published for long: the spool grows."),
        panel("timeseries", "Worker: raw records read, events folded, records published", [
            _q("A", f"sum(rate(jobstream_worker_records_read_total{_RATE}))", "raw read"),
            _q("B", f"sum by (cluster) (rate(jobstream_worker_events_folded_total{_RATE}))",
               "folded {{cluster}}"),
            _q("C", f"sum by (topic) (rate(jobstream_worker_records_published_total{_RATE}))",
               "to {{topic}}"),
        ], w=8, h=8, unit="reqps"),
        panel("timeseries", "Sink: records read, documents written", [
            _q("A", f"sum by (topic) (rate(jobstream_sink_records_read_total{_RATE}))",
               "from {{topic}}"),
            _q("B", "sum by (index) "
                    f"(rate(jobstream_sink_bulk_items_total{{outcome=\"ok\"}}{_RATE}))",
               "written {{index}}"),
        ], w=8, h=8, unit="reqps"),
    )
    grid.add(
        panel("timeseries", "Consumer lag", [
            _q("A", "sum by (group, topic) (jobstream_consumer_lag)", "{{group}} {{topic}}"),
        ], w=12, h=8, unit="short",
            description="Records past each group's commit: the worker reads the raw and "
                        "canonical topics, the sink the output topics (its lag counts what "
                        "Elasticsearch has not acknowledged)."),
        panel("stat", "Newest event per cluster, seconds ago", [
            _q("A", "time() - max by (cluster) (jobstream_last_event_timestamp_seconds)",
               "{{cluster}}"),
        ], w=12, h=8, unit="s",
            options={"reduceOptions": {"calcs": ["lastNotNull"], "values": False},
                     "colorMode": "background", "graphMode": "area"},
            field_config={"thresholds": {"mode": "absolute", "steps": [
                {"color": "green", "value": None}, {"color": "orange", "value": 300},
                {"color": "red", "value": 1800}]}},
            description="How old the newest folded event of each cluster is: a cluster "
                        "whose scheduler or edge went quiet turns red."),
    )
    grid.add(row("Trouble"))
    grid.add(
        panel("timeseries", "Dead letters by stage and reason", [
            _q("A", f"sum by (stage, reason) (increase(jobstream_dlq_records_total{_RATE}))",
               "{{stage}}: {{reason}}"),
        ], w=8, h=8, unit="short",
            description="Records sent to the DLQ topic, with the reason in their headers."),
        panel("timeseries", "Spool depth", [
            _q("A", "sum by (instance, spool) (jobstream_spool_depth)",
               "{{spool}} {{instance}}"),
        ], w=8, h=8, unit="short",
            description="Records an edge holds on disk until Kafka confirms them."),
        panel("timeseries", "Oldest spooled record", [
            _q("A", "max by (instance, spool) (jobstream_spool_oldest_age_seconds)",
               "{{spool}} {{instance}}"),
        ], w=8, h=8, unit="s"),
    )
    grid.add(
        panel("timeseries", "Elasticsearch bulk latency", [
            _q("A", "histogram_quantile(0.5, sum by (le) "
                    f"(rate(jobstream_sink_bulk_seconds_bucket{_RATE})))", "p50"),
            _q("B", "histogram_quantile(0.99, sum by (le) "
                    f"(rate(jobstream_sink_bulk_seconds_bucket{_RATE})))", "p99"),
        ], w=8, h=8, unit="s"),
        panel("timeseries", "Elasticsearch: retried, rejected and failed items", [
            _q("A", "sum by (index, outcome) (increase(jobstream_sink_bulk_items_total"
                    f"{{outcome=~\"retry|reject|fail\"}}{_RATE}))", "{{outcome}} {{index}}"),
            _q("B", f"sum(increase(jobstream_sink_retries_total{_RATE}))", "waits"),
        ], w=8, h=8, unit="short",
            description="retry: 429 or 5xx, written later; reject: the document's content, "
                        "to the DLQ; fail: the sink stops committing; waits: the sink's "
                        "backoffs, Elasticsearch unreachable included."),
        panel("timeseries", "Partitions the watchdog read again", [
            _q("A", "sum by (topic, kind) "
                    f"(increase(jobstream_watchdog_stalls_total{_RATE}))", "{{kind}} {{topic}}"),
        ], w=8, h=8, unit="short",
            description="Input partitions of the worker found stuck (agents/watchdog.py)."),
    )
    grid.add(
        panel("timeseries", "Resident memory", [
            _q("A", 'process_resident_memory_bytes{job=~"jobstream.*"}',
               "{{job}} {{instance}}"),
        ], w=24, h=8, unit="bytes",
            description="Of every scraped jobstream process (scrape jobs named jobstream*, "
                        "as in the README's example); an edge's target is under 50 MB."),
    )
    return dashboard(
        UID, "jobstream pipeline",
        description="jobstream watching itself: the Prometheus metrics of its edges, "
                    "worker and sink.",
        panels=grid.panels, variables=[], time_from="now-6h", refresh="30s")
