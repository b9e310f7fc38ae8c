"""Duplicate keys in a JSON object: refused, reason ``duplicate-key``.

JSON leaves the meaning of a repeated key open (RFC 8259 4: names SHOULD be unique); readers
disagree on whether the first or the last one counts, so a record that repeats a key (a
job id, an event name) could mean different jobs to different tools. jobstream refuses to
guess: the record goes to the DLQ whole (no real flux-core or Slurm record in the vectors
repeats a key).

The check costs little: the text's key separators (``":``) are counted and compared with
the keys the parsed value holds; only when they differ (a repeated key, a ``":`` inside a
string) or when a key may be spaced from its colon (``"a" :1``, which ``":`` misses, so a
repeat of it could go unseen) is the text parsed again, exactly, pair by pair.
"""

from __future__ import annotations

import json
from typing import Any

from pipeline.runtime.errors import ParseError

__all__ = ["check_duplicate_keys"]


def check_duplicate_keys(text: str, value: Any, what: str) -> None:
    """Raise ParseError ``duplicate-key`` if an object of ``text`` (parsed: ``value``)
    repeats a key."""
    separators = text.count('":')
    if separators == _count_keys(value) and not _spaced_colon(text, separators):
        return
    try:
        json.loads(text, object_pairs_hook=_unique)
    except _Duplicate as exc:
        raise ParseError("duplicate-key", f"{what}: an object repeats the key {exc.key!r} "
                         "(which one counts is ambiguous)") from None


def _spaced_colon(text: str, separators: int) -> bool:
    """Whether a colon of ``text`` may follow JSON whitespace, as the colon of a key spaced
    from it does: such a key is not among the ``separators`` (``":``) counted."""
    # Usually every colon follows a quote: one fast count says so, with no search.
    if text.count(":") == separators:
        return False
    return " :" in text or "\n:" in text or "\t:" in text or "\r:" in text


class _Duplicate(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Duplicate(key)
            seen.add(key)
    return obj


def _count_keys(value: Any) -> int:
    """Keys of every object in a parsed JSON value."""
    # Only containers go on the stack: most values are scalars, and pushing each one to
    # pop it again cost twice the time of this loop (it runs on every record).
    n = 0
    stack = [value] if type(value) is dict or type(value) is list else []
    while stack:
        item = stack.pop()
        if type(item) is dict:
            n += len(item)
            item = item.values()
        for child in item:
            kind = type(child)
            if kind is dict or kind is list:
                stack.append(child)
    return n
