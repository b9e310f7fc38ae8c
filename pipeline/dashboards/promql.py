"""The Prometheus targets of a dashboard, run as Grafana's Prometheus data source runs them.

Grafana sends a range target as ``/api/v1/query_range`` over the panel's time range with a
step of the panel's interval (never below the data source's scrape interval), and an
instant one as ``/api/v1/query`` at its end, after replacing its own variables:
``$__interval`` (the step), ``$__rate_interval`` (max(step + scrape interval, 4 × scrape
interval): a rate over it always holds at least four samples) and ``$__range``. The answer
is an error (the expression does not parse, or cannot be evaluated), no series, or
series. The building of the request and the reading of the answer are pure; only
:class:`Prometheus` does I/O.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.dashboards.grafana_time import DEFAULT_MAX_DATA_POINTS, TimeRange, auto_interval_ms
from pipeline.runtime.errors import ServiceError

__all__ = ["SCRAPE_INTERVAL_MS", "Answer", "Prometheus", "expand", "read_answer", "request"]

#: the data source's scrape interval (Grafana's default, and the local stack's Prometheus)
SCRAPE_INTERVAL_MS = 15_000

_VARIABLE = re.compile(r"\$(?:\{(__\w+)\}|(__\w+))")


def _duration(ms: int) -> str:
    """A Prometheus duration (whole seconds where it can)."""
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def expand(expr: str, *, interval_ms: int, range_ms: int,
           scrape_ms: int = SCRAPE_INTERVAL_MS) -> str:
    """``expr`` with Grafana's own variables replaced; others are left for Prometheus to
    refuse (a dashboard variable is substituted before)."""
    values = {
        "__interval": _duration(interval_ms), "__interval_ms": str(interval_ms),
        "__rate_interval": _duration(max(interval_ms + scrape_ms, 4 * scrape_ms)),
        "__range": _duration(range_ms), "__range_s": str(range_ms // 1000),
        "__range_ms": str(range_ms),
    }

    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return values.get(name, match.group(0))

    return _VARIABLE.sub(one, expr)


def request(target: Mapping[str, Any], time_range: TimeRange, *, min_interval: str = "",
            max_data_points: int = DEFAULT_MAX_DATA_POINTS,
            scrape_ms: int = SCRAPE_INTERVAL_MS) -> tuple[str, dict[str, str]]:
    """The API path and parameters of one target."""
    step = max(auto_interval_ms(time_range.span_ms, min_interval, max_data_points), scrape_ms)
    expr = expand(str(target.get("expr") or ""), interval_ms=step,
                  range_ms=time_range.span_ms, scrape_ms=scrape_ms)
    end = time_range.to_ms // step * step  # Grafana aligns the range to the step
    if target.get("instant") and not target.get("range"):
        return "/api/v1/query", {"query": expr, "time": f"{time_range.to_ms / 1000:.3f}"}
    start = time_range.from_ms // step * step
    return "/api/v1/query_range", {"query": expr, "start": f"{start / 1000:.3f}",
                                   "end": f"{end / 1000:.3f}", "step": f"{step / 1000:g}"}


@dataclass(frozen=True)
class Answer:
    """What Prometheus said to one target: an error, or how many series it returned."""

    error: str = ""
    series: int = 0


def read_answer(body: Mapping[str, Any]) -> Answer:
    """Prometheus's JSON answer (``status``, ``data.result`` or ``errorType``/``error``)."""
    if body.get("status") != "success":
        kind = body.get("errorType") or "error"
        return Answer(error=f"{kind}: {body.get('error') or 'no reason given'}")
    data = body.get("data") or {}
    result = data.get("result")
    if data.get("resultType") in ("scalar", "string"):
        return Answer(series=1)
    return Answer(series=len(result) if isinstance(result, list) else 0)


class Prometheus:
    """The HTTP API of one Prometheus."""

    def __init__(self, url: str, *, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def query(self, path: str, params: Mapping[str, str]) -> dict[str, Any]:
        """The JSON body of a query, an error body (400, 422) included; ServiceError when
        there is no answer to read."""
        data = urllib.parse.urlencode(params).encode()
        req = urllib.request.Request(f"{self.url}{path}", data=data, method="POST",  # noqa: S310 (the configured URL)
                                     headers={"Content-Type":
                                              "application/x-www-form-urlencoded"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # noqa: S310
                return dict(json.load(resp))
        except urllib.error.HTTPError as exc:
            try:
                return dict(json.load(exc))
            except ValueError:
                raise ServiceError(f"Prometheus at {self.url} answered {exc.code} "
                                   f"{exc.reason}") from exc
        except (OSError, ValueError) as exc:
            raise ServiceError(f"Prometheus unreachable at {self.url}: {exc}") from exc
