"""The demo's Prometheus: the local stack's, when it is built, scraping the demo's worker
and sink; at the end, what it saw.

The stack's Prometheus writes its scrape targets from the config it starts with (the
``[metrics]`` ports: :mod:`pipeline.tooling.stack.prometheus`), so the demo gives its
worker and sink metrics ports (the config's, else free ones) before the stack starts. A
Prometheus already running was started with its own config: the demo reuses it, and its
report says when it did not scrape the demo's processes.

What Prometheus saw is asked through its HTTP API with the dashboards' client
(:class:`pipeline.dashboards.promql.Prometheus`): whether each target was scraped during
the demo, how many records the worker read (``jobstream_worker_records_read_total``) and
at what rate, and the alerts firing (the shipped rules; none in a healthy demo). Reading
the answers is pure; only :func:`observe` does I/O.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console

from pipeline.dashboards.promql import SCRAPE_INTERVAL_MS, Prometheus, read_answer
from pipeline.runtime.children import free_port
from pipeline.runtime.config import Config
from pipeline.runtime.errors import ServiceError
from pipeline.tooling.stack.prometheus import PrometheusService, targets

__all__ = ["JOBS", "PrometheusSeen", "observe", "samples", "with_prometheus"]

#: the scrape jobs of the demo's processes (stack.prometheus.targets names them so)
JOBS = ("jobstream-worker", "jobstream-sink")
#: how long the end of the demo waits for a scrape of each process after its flow ended:
#: two scrape intervals and a margin (a scrape may fail once while a process is busy)
SCRAPE_WAIT_S = 2 * SCRAPE_INTERVAL_MS / 1000 + 5
_POLL_S = 1.0


def with_prometheus(cfg: Config, console: Console) -> Config:
    """``cfg`` asking the stack for its Prometheus, with the worker's and the sink's
    metrics ports set, when Prometheus is built; else ``cfg`` as it is, and a line saying
    the demo runs without."""
    service = PrometheusService(cfg, [])
    if not service.installed():
        console.print("[yellow]Prometheus is not built[/] (`jobstream stack fetch "
                      "prometheus` builds it): the demo runs without it")
        return cfg
    m = cfg.metrics
    return cfg.replace(stack={"prometheus": True},
                       metrics={"worker_port": m.worker_port or free_port(),
                                "sink_port": m.sink_port or free_port()})


@dataclass(frozen=True)
class PrometheusSeen:
    """What the demo's Prometheus saw of the demo."""

    url: str
    #: seconds the demo's processes ran, over which the figures are taken
    window_s: float
    #: scrape job -> scraped successfully at least once in the window (absent: no such
    #: target: the Prometheus was started with other metrics ports)
    scraped: dict[str, bool] = field(default_factory=dict)
    #: the worker's raw records read in the window, as Prometheus saw them
    records_read: float | None = None
    #: the names of the alerts firing at the end, with their labels' job when they have one
    firing: list[str] = field(default_factory=list)
    #: why a question got no answer ("" when every one did)
    error: str = ""

    @property
    def rate(self) -> float | None:
        """The worker's records read per second over the window."""
        if self.records_read is None or self.window_s <= 0:
            return None
        return self.records_read / self.window_s


def samples(body: Mapping[str, Any]) -> list[tuple[dict[str, str], float]]:
    """An instant vector answer's (labels, value) pairs; ServiceError on an error answer."""
    answer = read_answer(body)
    if answer.error:
        raise ServiceError(f"Prometheus refused a query: {answer.error}")
    out = []
    for item in (body.get("data") or {}).get("result") or []:
        _, value = item.get("value") or (0, "nan")
        out.append((dict(item.get("metric") or {}), float(value)))
    return out


def _scraped(prom: Prometheus, jobs: Sequence[str], window_s: float, at: float
             ) -> dict[str, bool]:
    selector = "|".join(jobs)
    body = prom.query("/api/v1/query", {
        "query": f'max_over_time(up{{job=~"{selector}"}}[{max(int(window_s), 1)}s])',
        "time": f"{at:.3f}"})
    found = {labels.get("job", ""): value == 1 for labels, value in samples(body)}
    return {job: found[job] for job in jobs if job in found}


def observe(prom: Prometheus, cfg: Config, started_at: float, flow_ended_at: float,
            wait_s: float = SCRAPE_WAIT_S) -> PrometheusSeen:
    """Ask ``prom`` what it saw from ``started_at`` (epoch seconds, the worker's start)
    to now, having waited (up to ``wait_s``) for a scrape of each demo process (``cfg``'s
    metrics ports) after ``flow_ended_at``, so that the worker's count holds all of its
    records."""
    jobs = [job for job, _ in targets(cfg) if job in JOBS]
    try:
        deadline = time.monotonic() + wait_s
        while True:
            now = time.time()
            since_end = _scraped(prom, jobs, now - flow_ended_at, now)
            if all(since_end.get(job) for job in jobs) or time.monotonic() >= deadline:
                break
            time.sleep(_POLL_S)
        now = time.time()
        window = now - started_at
        scraped = _scraped(prom, jobs, window, now)
        # the demo's worker is a new process, its counter counts from 0: its last value is
        # what it read (increase() needs two scrapes around the reads, and a short demo's
        # flow can fall between two 15 s scrapes)
        read = samples(prom.query("/api/v1/query", {
            "query": 'sum(max_over_time(jobstream_worker_records_read_total'
                     f'{{job="jobstream-worker"}}[{max(int(window), 1)}s]))',
            "time": f"{now:.3f}"}))
        alerts = samples(prom.query("/api/v1/query", {
            "query": 'ALERTS{alertstate="firing"}', "time": f"{now:.3f}"}))
    except ServiceError as exc:
        return PrometheusSeen(prom.url, time.time() - started_at, error=str(exc))
    firing = sorted({labels.get("alertname", "?") + (f" ({labels['job']})"
                                                     if labels.get("job") else "")
                     for labels, _ in alerts})
    return PrometheusSeen(prom.url, window, scraped,
                          records_read=read[0][1] if read else None, firing=firing)
