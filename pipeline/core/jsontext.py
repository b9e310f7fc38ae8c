"""Compact JSON text of a value, written by orjson.

jobstream writes compact JSON several times for every event (its canonical encoding, the
Avro event's context and facts, its entry in the job's table value) and for every line
of a bulk request. The standard library's encoder was a quarter of the jobs stage's CPU
(docs/benchmarks-history.md); orjson writes the same text about ten times faster.

Where the two differ: orjson writes a float below 1e-4 as ``1e-7`` (Python: ``1e-07``),
which reads back the same, and NaN and infinities as ``null`` (Python: ``NaN`` and
``Infinity``, which are not JSON). What orjson refuses (an integer beyond 64 bits,
nesting deeper than 255) is written by the standard library, so whatever encoded before
still encodes.

:func:`canonical` is text that is hashed and stored (a fold's fingerprints), so it must
stay what the standard library wrote, byte for byte: orjson writes it, and whenever its
text could differ (anything not ASCII or DEL, a float written with a negative exponent or
below 1e-4, a value orjson does not take as plain JSON) the standard library writes it
instead. Its values are the facts and context of events, read from JSON whose NaN and
infinities the parsers refuse: orjson would write those as ``null``, and they are not
looked for.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

__all__ = ["canonical", "dumps", "dumps_text"]

_OPTIONS = orjson.OPT_NON_STR_KEYS  # int, bool and None keys, as the standard library
_stdlib = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode

# dataclasses and dates are handed to _other, which refuses them: the standard library
# writes them (as str), orjson would as objects and ISO text
_CANONICAL_OPTIONS = (orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS
                      | orjson.OPT_PASSTHROUGH_DATETIME)
_stdlib_canonical = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str).encode
#: a float orjson writes with a negative exponent (``1e-7``; Python: ``1e-07``)
_NEGATIVE_EXPONENT = re.compile(rb"\de-")


def dumps(value: Any) -> bytes:
    """``value`` as compact UTF-8 JSON; TypeError (or ValueError) if it is not JSON.

    The bytes keep the buffer orjson wrote them in, 4 KiB however short the text: what is
    kept for long (a fold's entries) goes through :func:`dumps_text`, a str of its size.
    """
    try:
        return orjson.dumps(value, option=_OPTIONS)
    except orjson.JSONEncodeError:
        return _stdlib(value).encode()


def dumps_text(value: Any) -> str:
    """:func:`dumps` as text."""
    return dumps(value).decode()


def canonical(value: Any) -> str:
    """``json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)``, the same
    text (module docstring)."""
    try:
        text = orjson.dumps(value, default=_other, option=_CANONICAL_OPTIONS)
    except orjson.JSONEncodeError:  # not str keys, big integers, deep nesting, other types
        return _stdlib_canonical(value)
    # where its text may differ: not ASCII, DEL (Python: \u007f), a float below 1e-4
    # (``0.00001``, ``1e-7``; Python: ``1e-05``, ``1e-07``); ``in`` first, a regex is slower
    if (not text.isascii() or b"\x7f" in text or b"0.0000" in text
            or (b"e-" in text and _NEGATIVE_EXPONENT.search(text))):
        return _stdlib_canonical(value)
    return text.decode()


def _other(value: Any) -> Any:
    raise TypeError(type(value).__name__)
