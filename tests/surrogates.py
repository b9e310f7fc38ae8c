"""The parsers' property tests' own oracle for lone surrogates (independent of
pipeline.parsers.surrogates, which it checks)."""

from __future__ import annotations

from typing import Any


def holds_surrogate(value: Any) -> bool:
    """Whether a decoded JSON value holds a UTF-16 surrogate anywhere (keys included)."""
    if isinstance(value, str):
        return any("\ud800" <= c <= "\udfff" for c in value)
    if isinstance(value, dict):
        return any(holds_surrogate(k) or holds_surrogate(v) for k, v in value.items())
    return isinstance(value, list) and any(holds_surrogate(v) for v in value)
