"""Flux R version 1 (RFC 20): what a job was given.

* ``nnodes`` -- the number of distinct execution ranks in ``R_lite`` (as job-list counts);
* ``ncores`` / ``ngpus`` -- each ``R_lite`` entry's children apply to *each* of its ranks,
  so the count is the sum over entries of |rank| x |core| (|gpu|): the RFC 20 example,
  ranks 19-22 with cores 0-47 and GPUs 0-7, is 4 nodes, 192 cores, 32 GPUs;
* ``nodelist`` -- ``execution.nodelist`` RFC 29 hostlists expanded, in order;
* ``expiration`` -- ``execution.expiration`` when set (0 means unset).

``nodelist`` is REQUIRED by RFC 20 but some real R objects lack it: tolerated. The
``scheduling`` key (scheduler-private, possibly a large graph) is dropped, as the journal
does, so an R read from a file looks like one from the journal.

Bounds, checked before anything is expanded or multiplied: every rank, core and GPU id and
every count derived from them (``nnodes``, ``ncores``, ``ngpus``) is at most
:data:`MAX_ID` (2**63 - 1), the largest integer the job state holds (Avro ``long``): a
larger one is refused here as ``bad-R`` rather than accepted and then failing the job
state's encoding. (Flux itself keeps idset members in ``unsigned int``, so real R objects
stay far below.) An id's digits are counted before ``int()`` reads them; the nodelist is
bounded by :data:`MAX_NODES` hosts and :data:`pipeline.core.hostlist.MAX_CHARS` characters.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from pipeline.core.hostlist import MAX_CHARS, MAX_DIGITS, expand_hostlist
from pipeline.runtime.errors import ParseError

__all__ = ["MAX_ID", "MAX_NODES", "R_facts", "redact_R"]

#: Far above any machine; a nodelist naming more hosts is refused, not expanded.
MAX_NODES = 100_000
#: ids and counts are 64-bit signed downstream (the job state's Avro ``long``)
MAX_ID = 2**63 - 1
_IDRANGE = re.compile(r"\s*([0-9]+)(?:-([0-9]+))?\s*")


def _bad(message: str) -> ParseError:
    return ParseError("bad-R", message)


def redact_R(R: Mapping[str, Any]) -> dict[str, Any]:
    """R without the scheduler-private ``scheduling`` key."""
    return {k: v for k, v in R.items() if k != "scheduling"}


def _expand_nodelist(value: Any) -> list[str]:
    entries = [value] if isinstance(value, str) else value
    if not isinstance(entries, list):
        raise _bad("execution.nodelist must be a list of hostlists")
    hosts: list[str] = []
    chars = 0
    for i, entry in enumerate(entries):
        if not isinstance(entry, str):
            raise _bad(f"execution.nodelist[{i}] must be a string")
        try:
            names = expand_hostlist(entry, max_hosts=MAX_NODES - len(hosts),
                                    max_chars=MAX_CHARS - chars)
        except (ValueError, RecursionError) as exc:
            raise ParseError("bad-hostlist", f"execution.nodelist[{i}] {entry[:80]!r}: {exc}"
                             ) from None
        hosts.extend(names)
        chars += sum(map(len, names))
    return hosts


def _intervals(value: Any, where: str) -> list[tuple[int, int]]:
    """An RFC 22 idset as merged ``(lo, hi)`` intervals: counted without being expanded,
    so ``"0-999999"`` costs as little as ``"0"``."""
    if not isinstance(value, str):
        raise _bad(f"{where} must be an RFC 22 idset string, not {type(value).__name__}")
    text = value.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    spans = []
    for part in text.split(",") if text else ():
        m = _IDRANGE.fullmatch(part)
        if m is None:
            raise _bad(f"{where} {value[:80]!r}: bad idset element {part[:40]!r}")
        lo = _id(m.group(1), where, part)
        hi = _id(m.group(2), where, part) if m.group(2) else lo
        if hi < lo:
            raise _bad(f"{where} {value[:80]!r}: bad idset element {part[:40]!r}")
        spans.append((lo, hi))
    return _merge(spans)


def _id(digits: str, where: str, part: str) -> int:
    """One idset member; its digits counted before ``int()`` reads them."""
    if len(digits) > MAX_DIGITS or int(digits) > MAX_ID:
        raise _bad(f"{where}: {part[:40]!r} names an id above 2**63 - 1")
    return int(digits)


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(spans):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    return merged


def _size(spans: list[tuple[int, int]]) -> int:
    return sum(hi - lo + 1 for lo, hi in spans)


def _time(execution: Mapping[str, Any], key: str) -> float | int | None:
    value = execution.get(key)
    if value is None:
        return None
    # not math.isfinite on an int: one past a float's range raises OverflowError
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or (isinstance(value, float) and not math.isfinite(value)) or value < 0):
        raise _bad(f"execution.{key} must be a number >= 0, not {str(value)[:40]}")
    return value


def R_facts(R: Any) -> dict[str, Any]:
    """Facts of an R version 1 object; ``ParseError`` (bad-R, bad-hostlist) if malformed."""
    if not isinstance(R, dict):
        raise _bad(f"R must be an object, not {type(R).__name__}")
    if R.get("version") != 1 or isinstance(R.get("version"), bool):
        raise _bad(f"R version must be 1, not {R.get('version')!r}")
    execution = R.get("execution")
    if not isinstance(execution, dict):
        raise _bad("R.execution must be an object")
    entries = execution.get("R_lite")
    if not isinstance(entries, list):
        raise _bad("execution.R_lite must be a list")
    rank_spans: list[tuple[int, int]] = []
    counts = {"core": 0, "gpu": 0}
    for i, entry in enumerate(entries):
        where = f"execution.R_lite[{i}]"
        if not isinstance(entry, dict):
            raise _bad(f"{where} must be an object")
        spans = _intervals(entry.get("rank"), where + ".rank")
        children = entry.get("children", {})
        if not isinstance(children, dict):
            raise _bad(f"{where}.children must be an object")
        rank_spans.extend(spans)
        for kind in counts:
            if kind in children:
                ids = _intervals(children[kind], f"{where}.children.{kind}")
                counts[kind] += _size(spans) * _size(ids)
                if counts[kind] > MAX_ID:
                    raise _bad(f"{where}: ranks x {kind}s make more than 2**63 - 1 "
                               f"{kind}s")
    nnodes = _size(_merge(rank_spans))
    if nnodes > MAX_ID:
        raise _bad("execution.R_lite names more than 2**63 - 1 ranks")
    facts: dict[str, Any] = {"nnodes": nnodes, "ncores": counts["core"]}
    if counts["gpu"]:
        facts["ngpus"] = counts["gpu"]
    if execution.get("nodelist") is not None:
        facts["nodelist"] = _expand_nodelist(execution["nodelist"])
    expiration = _time(execution, "expiration")
    _time(execution, "starttime")
    if expiration:
        facts["expiration"] = expiration
    return facts
