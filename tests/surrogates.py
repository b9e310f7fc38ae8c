"""The parsers' property tests' own oracle for lone surrogates (independent of
pipeline.parsers.surrogates, which it checks)."""

from __future__ import annotations

import json
from typing import Any


def holds_surrogate(value: Any) -> bool:
    """Whether a decoded JSON value holds a UTF-16 surrogate anywhere (keys included)."""
    if isinstance(value, str):
        return any("\ud800" <= c <= "\udfff" for c in value)
    if isinstance(value, dict):
        return any(holds_surrogate(k) or holds_surrogate(v) for k, v in value.items())
    return isinstance(value, list) and any(holds_surrogate(v) for v in value)


def text_holds_surrogate(text: str) -> bool:
    """Whether JSON ``text`` decodes to a surrogate anywhere, in every value of a key it
    repeats too (``"\\ud83d\\ude00"`` and ``"😀"`` are one key once decoded): a parser
    reads the whole text, ``json.loads`` keeps only a repeated key's last value."""
    return holds_surrogate(json.loads(
        text, object_pairs_hook=lambda pairs: [x for pair in pairs for x in pair]))
