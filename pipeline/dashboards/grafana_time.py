"""Dashboard times and intervals as Grafana reads, rounds and prints them (pure).

The time range of a check (``now-24h``, epoch milliseconds, ISO 8601), Grafana's interval
syntax, the ``auto`` interval of a panel (kbn's roundInterval) and Go's rendering of a
duration (what ``$__interval`` becomes). Apart from :mod:`pipeline.dashboards.grafana_query`,
which builds the requests, because the check's command line and its report read times too.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import datetime

from pipeline.runtime.errors import JobstreamError

__all__ = [
    "DEFAULT_MAX_DATA_POINTS",
    "QueryError",
    "TimeRange",
    "auto_interval_ms",
    "go_duration",
    "parse_duration_ms",
    "parse_time",
    "round_interval_ms",
]

#: Points per series Grafana aims at for an ``auto`` interval (about a panel's width).
DEFAULT_MAX_DATA_POINTS = 1000

_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000,
            "w": 604_800_000, "M": 2_592_000_000, "y": 31_536_000_000}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w|M|y)\s*$")
_RELATIVE = re.compile(r"^now(?:\s*([+-])\s*(\d+)\s*(ms|s|m|h|d|w|M|y))?$")


class QueryError(JobstreamError):
    """A target cannot be turned into a request (what Grafana would refuse too)."""


@dataclass(frozen=True)
class TimeRange:
    """A dashboard time range in epoch milliseconds."""

    from_ms: int
    to_ms: int

    @property
    def span_ms(self) -> int:
        return self.to_ms - self.from_ms


def parse_duration_ms(text: str) -> int:
    """``30s``, ``5m``, ``1h``, ``7d`` ... -> milliseconds (Grafana's interval syntax)."""
    m = _DURATION.match(text)
    if not m:
        raise QueryError(f"not a duration: {text!r} (expected e.g. 30s, 5m, 24h, 7d)")
    return round(float(m.group(1)) * _UNIT_MS[m.group(2)])


def parse_time(text: str, now_ms: int | None = None) -> int:
    """A Grafana time (``now``, ``now-24h``), epoch milliseconds or an ISO 8601 date."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    text = text.strip()
    m = _RELATIVE.match(text)
    if m:
        if not m.group(1):
            return now
        delta = int(m.group(2)) * _UNIT_MS[m.group(3)]
        return now - delta if m.group(1) == "-" else now + delta
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise QueryError(f"not a time: {text!r} (expected now, now-24h, epoch ms or an "
                         "ISO 8601 date)") from None
    if moment.tzinfo is None:
        raise QueryError(f"time {text!r} has no time zone (add Z or +00:00)")
    return int(moment.timestamp() * 1000)


# Grafana's roundInterval (kbn): upper bound of the raw interval -> interval used.
_ROUNDING: tuple[tuple[int, int], ...] = (
    (10, 1), (15, 10), (35, 20), (75, 50), (150, 100), (350, 200), (750, 500),
    (1_500, 1_000), (3_500, 2_000), (7_500, 5_000), (12_500, 10_000), (17_500, 15_000),
    (25_000, 20_000), (45_000, 30_000), (90_000, 60_000), (210_000, 120_000),
    (450_000, 300_000), (750_000, 600_000), (1_050_000, 900_000), (1_500_000, 1_200_000),
    (2_700_000, 1_800_000), (5_400_000, 3_600_000), (9_000_000, 7_200_000),
    (16_200_000, 10_800_000), (24_300_000, 21_600_000), (64_800_000, 43_200_000),
    (129_600_000, 86_400_000), (604_800_000, 86_400_000), (1_814_400_000, 604_800_000),
    (3_628_800_000, 2_592_000_000),
)


def round_interval_ms(raw_ms: float) -> int:
    for bound, rounded in _ROUNDING:
        if raw_ms <= bound:
            return rounded
    return 31_536_000_000


def auto_interval_ms(span_ms: int, min_interval: str,
                     max_data_points: int = DEFAULT_MAX_DATA_POINTS) -> int:
    """The interval Grafana gives an ``auto`` date histogram: span / points, rounded,
    never below the panel's (or data source's) min interval."""
    return max(round_interval_ms(span_ms / max(max_data_points, 1)),
               parse_duration_ms(min_interval) if min_interval else 0)


def go_duration(ms: int) -> str:
    """Go's ``time.Duration.String()`` of whole milliseconds (what ``$__interval`` becomes)."""
    if ms <= 0:
        return "0s"
    if ms < 1000:
        return f"{ms}ms"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds = rest / 1000
    sec = f"{seconds:g}s"
    if hours:
        return f"{hours}h{minutes}m{sec}"
    if minutes:
        return f"{minutes}m{sec}"
    return sec
