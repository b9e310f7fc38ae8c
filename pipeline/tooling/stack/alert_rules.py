"""The shipped alert rules with their durations scaled: the same expressions on a shorter
clock, for a test that watches them fire in a real Prometheus within seconds.

Every duration a rule holds is scaled by one factor: ``for`` and ``keep_firing_for``, and
in the expression the range selectors (``[10m]``), subquery steps, offsets and durations
written as numbers (``time() - t > 30m``: a threshold in seconds is written as a duration
in the rules for this reason). Counts and ratios stay as they are. String literals (label
values) are left alone.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

__all__ = ["parse_duration", "scale_durations", "scaled_expr"]

_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000,
             "w": 7 * 86_400_000, "y": 365 * 86_400_000}
_PART = r"\d+(?:ms|[smhdwy])"
#: a PromQL duration (``1h30m``), not part of a name or a number; or a string literal,
#: matched first so that what is inside one is never taken for a duration
_TOKEN = re.compile(r"\"(?:\\.|[^\"\\])*\"|'(?:\\.|[^'\\])*'|`[^`]*`"
                    rf"|(?<![\w.])(?P<d>(?:{_PART})+)(?![\w.])")
_WHOLE = re.compile(rf"(?:{_PART})+")


def parse_duration(text: str) -> int:
    """Milliseconds of a Prometheus duration (``90s``, ``1h30m``, ``250ms``)."""
    if not _WHOLE.fullmatch(text):
        raise ValueError(f"not a Prometheus duration: {text!r}")
    return sum(int(n) * _UNITS_MS[unit] for n, unit in re.findall(r"(\d+)(ms|[smhdwy])", text))


def _format(ms: int) -> str:
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def _scaled(text: str, factor: float) -> str:
    return _format(max(1, round(parse_duration(text) * factor)))


def scaled_expr(expr: str, factor: float) -> str:
    """``expr`` (PromQL) with every duration multiplied by ``factor`` (to the millisecond,
    at least 1 ms)."""
    return _TOKEN.sub(lambda m: _scaled(m["d"], factor) if m["d"] else m[0], expr)


def scale_durations(rules_yaml: str, factor: float) -> str:
    """A rules file (YAML text) with every rule's durations multiplied by ``factor``."""
    if factor <= 0:
        raise ValueError(f"a duration factor must be positive, not {factor}")
    doc: dict[str, Any] = yaml.safe_load(rules_yaml)
    for group in doc.get("groups") or []:
        if "interval" in group:
            group["interval"] = _scaled(str(group["interval"]), factor)
        for rule in group.get("rules") or []:
            rule["expr"] = scaled_expr(str(rule["expr"]), factor)
            for key in ("for", "keep_firing_for"):
                if key in rule:
                    rule[key] = _scaled(str(rule[key]), factor)
    return yaml.safe_dump(doc, sort_keys=False)
