"""A real Prometheus watching a fault scenario: it scrapes the flow's worker, sink and edge
metrics ports every half second and evaluates the shipped alert rules with every duration
scaled down 300 times (5 minutes -> 1 s, 30 minutes -> 6 s;
:func:`pipeline.tooling.stack.alert_rules.scale_durations`), so that what an outage of
minutes fires, an outage of seconds fires, through the same expressions. The ``ALERTS``
series it records say when each alert fired and when it resolved."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harness import Flow, wait_until
from prometheus_bin import running_prometheus

from pipeline.tooling.stack.alert_rules import scale_durations
from pipeline.tooling.stack.prometheus import RULES, scrape_config, targets

__all__ = ["FACTOR", "INTERVAL_S", "AlertWatch", "wall", "watching"]

#: the rules' clock against the shipped one
FACTOR = 1 / 300
#: scrapes and rule evaluations: several within the shortest scaled window (1 s)
INTERVAL_S = 0.5


class AlertWatch:
    """What a scenario's Prometheus says of the alerts (wall-clock times, as Prometheus's)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def get(self, path: str, **params: Any) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}{path}{query}", timeout=10) as resp:  # noqa: S310 (loopback)
            body = json.load(resp)
        assert body["status"] == "success", body
        return body["data"]

    def targets_up(self, expected: int) -> bool:
        active = self.get("/api/v1/targets")["activeTargets"]
        return len(active) == expected and all(t["health"] == "up" for t in active)

    def firing(self) -> set[str]:
        """The alerts firing now."""
        return {a["labels"]["alertname"] for a in self.get("/api/v1/alerts")["alerts"]
                if a["state"] == "firing"}

    def _fired(self, alertname: str, start: float, end: float) -> list[dict[str, Any]]:
        """The ``ALERTS`` series of ``alertname`` firing between ``start`` and ``end``."""
        return self.get("/api/v1/query_range",
                        query=f'ALERTS{{alertname="{alertname}", alertstate="firing"}}',
                        start=f"{start:.3f}", end=f"{end:.3f}", step=f"{INTERVAL_S}")["result"]

    def labels(self, alertname: str, label: str, start: float, end: float) -> set[str]:
        """The values of ``label`` of the label sets ``alertname`` fired for."""
        return {series["metric"].get(label, "") for series in self._fired(alertname, start, end)}

    def spans(self, alertname: str, start: float, end: float) -> list[tuple[float, float]]:
        """When ``alertname`` fired between ``start`` and ``end``, for any of its label sets:
        (first, last) evaluation of each stretch it kept firing."""
        data = self._fired(alertname, start, end)
        times = sorted({float(t) for series in data for t, _ in series["values"]})
        out: list[tuple[float, float]] = []
        for t in times:
            if out and t - out[-1][1] <= 1.5 * INTERVAL_S:
                out[-1] = (out[-1][0], t)
            else:
                out.append((t, t))
        return out

    def report(self, alertnames: list[str], start: float, end: float) -> str:
        """Each alert's firing stretches, in seconds from ``start`` (for a failure)."""
        return "; ".join(f"{name}: " + (", ".join(f"{a - start:.1f}-{b - start:.1f}s"
                                                  for a, b in self.spans(name, start, end))
                                        or "never")
                         for name in alertnames)


@contextmanager
def watching(flow: Flow, root: Path) -> Iterator[AlertWatch]:
    """A Prometheus scraping ``flow``'s metrics ports (its Flow has ``metrics``), with the
    scaled rules; yielded once it scrapes every port."""
    root.mkdir(parents=True, exist_ok=True)
    rules = root / "jobstream-rules-scaled.yml"
    rules.write_text(scale_durations(RULES.read_text(), FACTOR))
    conf = scrape_config(flow.cfg, rules, interval=f"{int(INTERVAL_S * 1000)}ms")
    expected = len(targets(flow.cfg))
    assert expected == 3, f"the flow serves {expected} metrics ports, not its worker's, " \
                          "sink's and edge's"
    with running_prometheus(root, conf) as url:
        watch = AlertWatch(url)
        wait_until("Prometheus to scrape the worker, the sink and the edge",
                   lambda: watch.targets_up(expected), alive=flow.procs)
        yield watch


def wall(monotonic: float) -> float:
    """The wall-clock time (Prometheus's) of a ``time.monotonic()`` reading."""
    return time.time() - (time.monotonic() - monotonic)
