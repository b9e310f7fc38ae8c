"""Values as Grafana writes them in a unit with a number of decimals: its value formats
(grafana/grafana's ``packages/grafana-data/src/valueFormats``: ``toFixed``,
``scaledUnits``, ``toSeconds``, ``toDuration``, ...). An unknown unit is printed after the
value, as Grafana's fallback ``toFixedUnit(id)`` does. Times are shown in UTC (Grafana uses
the browser's time zone).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from pipeline.dashboards.preview.frames import number_text

__all__ = ["TIME_FORMAT", "format_value", "is_date_unit", "utc"]

#: how a time is written (Grafana's ISO format without the offset: the times are UTC)
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"

#: a number unit's formatter: (value, decimals) to (number text, suffix)
_NumberFormat = Callable[[float, int | None], tuple[str, str]]


def format_value(value: Any, unit: str | None = None, decimals: int | None = None, *,
                 now_ms: int | None = None) -> str:
    """``value`` as Grafana shows it in ``unit`` with ``decimals`` (auto when None).
    ``now_ms``: the time ``dateTimeFromNow`` counts from; the clock when None."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if not isinstance(value, int | float):
        return str(value)
    prefix, text, suffix = _format_parts(float(value), unit or "none", decimals, now_ms)
    return f"{prefix}{text}{suffix}"


def is_date_unit(unit: str | None) -> bool:
    """Whether ``unit`` writes an epoch-milliseconds value as a date."""
    return unit in _DATE_UNITS


def utc(ms: float) -> datetime:
    """Epoch milliseconds as a UTC datetime."""
    return datetime.fromtimestamp(ms / 1000, UTC)


def _format_parts(v: float, unit: str, decimals: int | None, now_ms: int | None
                  ) -> tuple[str, str, str]:
    if math.isnan(v):
        return "", "NaN", ""
    simple = _SIMPLE_UNITS.get(unit)
    if simple is not None:
        text, suffix = simple(v, decimals)
        return "", text, suffix
    date = _DATE_UNITS.get(unit)
    if date is not None:
        return "", date(v, now_ms), ""
    key, _, sub = unit.partition(":")
    if sub and key == "prefix":
        return sub, _to_fixed(v, decimals), ""
    if sub and key == "suffix":
        return "", _to_fixed(v, decimals), " " + sub
    if sub and key == "count":
        text, suffix = _count(sub)(v, decimals)
        return "", text, suffix
    if sub and key == "time":
        return "", _iso(v, now_ms), ""
    return "", _to_fixed(v, decimals), " " + unit     # toFixedUnit(id): unknown units



def _decimals_for(value: float) -> int:
    """getDecimalsForValue of valueFormats.ts."""
    log10 = math.floor(math.log(abs(value)) / math.log(10))
    dec = -log10 + 1
    norm = value / 10 ** -dec
    if norm > 2.25:   # 2.5 needs one more decimal
        dec += 1
    if value % 1 == 0:
        dec = 0
    return max(0, dec)


def _to_fixed(value: float, decimals: int | None) -> str:
    """toFixed of valueFormats.ts."""
    if math.isinf(value):
        return "\N{INFINITY}" if value > 0 else "-\N{INFINITY}"
    if decimals is None:
        decimals = 0 if value == 0 else _decimals_for(value)
    decimals = max(0, int(decimals))
    if value == 0:
        return f"{0:.{decimals}f}"
    factor = 10 ** decimals
    formatted = number_text(math.floor(value * factor + 0.5) / factor)   # JS Math.round
    if "e" in formatted:
        return formatted
    dot = formatted.find(".")
    precision = 0 if dot == -1 else len(formatted) - dot - 1
    if precision < decimals:
        return (formatted if precision else formatted + ".") + "0" * (decimals - precision)
    return formatted


def _scaled(factor: int, ext: Sequence[str], offset: int = 0) -> _NumberFormat:
    """scaledUnits of valueFormats.ts."""
    def fmt(size: float, decimals: int | None) -> tuple[str, str]:
        if math.isinf(size):
            return _to_fixed(size, decimals), ext[0]
        si = math.floor(math.log10(abs(size)) / math.log10(factor)) if size else -10**9
        suffix = ext[min(max(offset + si, 0), len(ext) - 1)]
        power = min(max(si, -offset), len(ext) - offset - 1)
        return _to_fixed(size / factor ** power, decimals), suffix
    return fmt


def _fixed_unit(unit: str) -> _NumberFormat:
    return lambda v, d: (_to_fixed(v, d), f" {unit}" if unit else "")


def _by_steps(steps: Sequence[tuple[float, float, str]], last: tuple[float, str]
              ) -> _NumberFormat:
    """The time units of dateTimeFormatters.ts: below each ``(limit, divisor, name)``'s
    limit, the value divided and named so; else ``last`` (divisor, name)."""
    def fmt(v: float, d: int | None) -> tuple[str, str]:
        for below, divisor, name in steps:
            if abs(v) < below:
                return _to_fixed(v / divisor, d), name
        return _to_fixed(v / last[0], d), last[1]
    return fmt


_SECONDS_AND_MORE = _by_steps([(60, 1, " s"), (3600, 60, " min"), (86400, 3600, " hour"),
                               (604800, 86400, " day"), (31536000, 604800, " week")],
                              (3.15569e7, " year"))
_MILLISECONDS = _by_steps([(1000, 1, " ms"), (60000, 1000, " s"), (3600000, 60000, " min"),
                           (86400000, 3600000, " hour"), (31536000000, 86400000, " day")],
                          (31536000000, " year"))
_MINUTES = _by_steps([(60, 1, " min"), (1440, 60, " hour"), (10080, 1440, " day"),
                      (604800, 10080, " week")], (5.25948e5, " year"))
_HOURS = _by_steps([(24, 1, " hour"), (168, 24, " day"), (8760, 168, " week")],
                   (8760, " year"))
_DAYS = _by_steps([(7, 1, " day"), (365, 7, " week")], (365, " year"))


def _seconds(v: float, d: int | None) -> tuple[str, str]:
    """toSeconds of dateTimeFormatters.ts."""
    if v == 0:   # "0 s", not "0 ns"
        return "0", " s"
    for below, scale, name in ((1e-6, 1e9, " ns"), (1e-3, 1e6, " \N{MICRO SIGN}s"),
                               (1, 1e3, " ms")):
        if abs(v) < below:
            return _to_fixed(v * scale, d), name
    return _SECONDS_AND_MORE(v, d)


_INTERVALS_S = (("year", 31536000), ("month", 2592000), ("week", 604800), ("day", 86400),
                ("hour", 3600), ("minute", 60), ("second", 1), ("millisecond", 0.001))


def _duration(scale_s: float, scale: str) -> _NumberFormat:
    """toDuration of dateTimeFormatters.ts: the largest unit, and ``decimals`` more."""
    def fmt(size: float, decimals: int | None) -> tuple[str, str]:
        if size == 0:
            return f"0 {scale}s", ""
        if size < 0:
            text, _ = fmt(-size, decimals)
            return f"{text} ago", ""
        ms = size * scale_s * 1000
        parts: list[str] = []
        left = 0 if decimals is None else decimals
        started = False
        for name, seconds in _INTERVALS_S:
            if left < 0:
                break
            interval = seconds * 1000
            value = ms / interval
            if value >= 1 or started:
                started = True
                whole = math.floor(value)
                parts.append(f"{whole} {name}{'' if whole == 1 else 's'}")
                ms %= interval
                left -= 1
        return ", ".join(parts), ""
    return fmt


def _hms(v: float, _: int | None) -> tuple[str, str]:
    """toDurationInHoursMinutesSeconds."""
    if v < 0:
        text, _unused = _hms(-v, None)
        return f"{text} ago", ""
    h, m, s = math.floor(v / 3600), math.floor(v % 3600 / 60), math.floor(v % 3600 % 60)
    return f"{h:02d}:{m:02d}:{s:02d}", ""


def _dhms(v: float, d: int | None) -> tuple[str, str]:
    """toDurationInDaysHoursMinutesSeconds."""
    if v < 0:
        text, _ = _dhms(-v, d)
        return f"{text} ago", ""
    days = math.floor(v / 86400)
    text, _ = _hms(v % 86400, d)
    return (f"{days} d " if days else "") + text, ""


_BINARY = tuple(" " + p for p in ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi", "Yi"))
_SI = ("f", "p", "n", "\N{MICRO SIGN}", "m", "", "k", "M", "G", "T", "P", "E", "Z", "Y")


def _binary(unit: str, offset: int = 0) -> _NumberFormat:
    return _scaled(1024, tuple(p + unit for p in _BINARY), offset)


def _decimal_si(unit: str, offset: int = 0) -> _NumberFormat:
    return _scaled(1000, tuple(f" {p}{unit}" for p in _SI), _SI.index("") + offset)


def _percent(scale: float) -> _NumberFormat:
    return lambda v, d: (_to_fixed(v * scale, d), "%")


def _count(symbol: str) -> _NumberFormat:
    """simpleCountUnit: 1.5K reqps."""
    scaler = _scaled(1000, ("", "K", "M", "B", "T"))

    def fmt(v: float, d: int | None) -> tuple[str, str]:
        text, suffix = scaler(v, d)
        return text, f"{suffix} {symbol}"
    return fmt


_SIMPLE_UNITS: dict[str, _NumberFormat] = {
    "none": _fixed_unit(""),
    "short": _scaled(1000, ("", " K", " Mil", " Bil", " Tri", " Quadr", " Quint", " Sext",
                            " Sept")),
    "percent": _percent(1),
    "percentunit": _percent(100),
    "s": _seconds,
    "ms": _MILLISECONDS,
    "m": _MINUTES,
    "h": _HOURS,
    "d": _DAYS,
    "dtdurations": _duration(1, "second"),
    "dtdurationms": _duration(0.001, "millisecond"),
    "dthms": _hms,
    "dtdhms": _dhms,
    "bytes": _binary("B"),
    "kbytes": _binary("B", 1),
    "mbytes": _binary("B", 2),
    "gbytes": _binary("B", 3),
    "bits": _binary("b"),
    "decbytes": _decimal_si("B"),
    "decbits": _decimal_si("b"),
    "Bps": _decimal_si("B/s"),
    "bps": _decimal_si("bps"),
    "hertz": _decimal_si("Hz"),
    "reqps": _count("reqps"),
    "ops": _count("ops"),
    "cps": _count("cps"),
    "rps": _count("rps"),
    "wps": _count("wps"),
    "iops": _count("iops"),
    "cpm": _count("cpm"),
    "opm": _count("opm"),
}


def _from_now(ms: float, now_ms: int | None) -> str:
    """moment's ``fromNow`` (Grafana's dateTimeFromNow), English, moment's thresholds."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    span = abs(ms - now) / 1000
    text = "a few seconds" if round(span) <= 44 else _span_text(span)
    return f"in {text}" if ms > now else f"{text} ago"


def _span_text(span: float) -> str:
    """A span of ``span`` seconds in the largest unit of which it is at least one, below
    moment's threshold for the unit (a month is 146097/4800 days, as moment counts)."""
    days = span / 86400
    for count, below, one, plural in ((round(span / 60), 45, "a minute", "minutes"),
                                      (round(span / 3600), 22, "an hour", "hours"),
                                      (round(days), 26, "a day", "days"),
                                      (round(days * 4800 / 146097), 11, "a month", "months")):
        if count <= 1:
            return one
        if count < below:
            return f"{count} {plural}"
    years = round(days / 365)
    return "a year" if years <= 1 else f"{years} years"


def _iso(v: float, _: int | None) -> str:
    return utc(v).strftime(TIME_FORMAT)


def _no_date_if_today(v: float, now_ms: int | None) -> str:
    now = utc(time.time() * 1000 if now_ms is None else now_ms)
    shown = utc(v)
    return shown.strftime("%H:%M:%S" if shown.date() == now.date() else TIME_FORMAT)


_DATE_UNITS: dict[str, Callable[[float, int | None], str]] = {
    "dateTimeAsIso": _iso,
    "dateTimeAsSystem": _iso,
    "dateTimeAsLocal": _iso,
    "dateTimeAsUS": lambda v, _: utc(v).strftime("%m/%d/%Y %I:%M:%S %p"),
    "dateTimeAsIsoNoDateIfToday": _no_date_if_today,
    "dateTimeFromNow": _from_now,
}
