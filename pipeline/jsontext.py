"""Compact JSON text of a value, written by orjson.

jobstream writes compact JSON several times for every event (its canonical encoding, the
Avro event's context and facts, its entry in the job's table value) and for every line
of a bulk request. The standard library's encoder was a quarter of the jobs stage's CPU
(BENCHMARKS.md); orjson writes the same text about ten times faster.

Where the two differ: orjson writes a float below 1e-4 as ``1e-7`` (Python: ``1e-07``),
and NaN and infinities as ``null`` (Python: ``NaN``, which no JSON reader need accept).
Both read back as the same values. What orjson refuses (an integer beyond 64 bits,
nesting deeper than 255) is written by the standard library, so whatever encoded before
still encodes. Text that is stored and compared byte for byte (event ids, a fold's
fingerprints) keeps the standard library's encoder.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

__all__ = ["dumps", "dumps_text"]

_OPTIONS = orjson.OPT_NON_STR_KEYS  # int, bool and None keys, as the standard library
_stdlib = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def dumps(value: Any) -> bytes:
    """``value`` as compact UTF-8 JSON; TypeError (or ValueError) if it is not JSON."""
    try:
        return orjson.dumps(value, option=_OPTIONS)
    except orjson.JSONEncodeError:
        return _stdlib(value).encode()


def dumps_text(value: Any) -> str:
    """:func:`dumps` as text."""
    return dumps(value).decode()
