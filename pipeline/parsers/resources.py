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
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from pipeline.errors import ParseError
from pipeline.hostlist import expand_hostlist

__all__ = ["MAX_NODES", "R_facts", "redact_R"]

#: Far above any machine; a nodelist naming more hosts is refused, not expanded.
MAX_NODES = 100_000
_GROUP = re.compile(r"\[([^\[\]]*)\]")
# \d, not [0-9]: int() and the hostlist module accept any Unicode decimal digit.
_RANGE = re.compile(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?")
_IDRANGE = re.compile(r"\s*([0-9]+)(?:-([0-9]+))?\s*")
_TOP_COMMA = re.compile(r",(?![^\[]*\])")


def _bad(message: str) -> ParseError:
    return ParseError("bad-R", message)


def redact_R(R: Mapping[str, Any]) -> dict[str, Any]:
    """R without the scheduler-private ``scheduling`` key."""
    return {k: v for k, v in R.items() if k != "scheduling"}


def _hostlist_bound(text: str) -> int:
    """How many hosts ``text`` would expand to, without expanding it: every bracket group
    of an element multiplies (``n[0-999][0-999]`` is a million names). Malformed groups
    count as one; expand_hostlist reports them."""
    total = 0
    for element in _TOP_COMMA.split(text):
        n = 1
        for group in _GROUP.findall(element):
            size = 0
            for part in group.split(","):
                m = _RANGE.fullmatch(part)
                lo, hi = (int(m.group(1)), int(m.group(2) or m.group(1))) if m else (0, 0)
                size += max(hi - lo + 1, 1)
            n *= max(size, 1)
            if n > MAX_NODES:
                return n
        total += n
    return total


def _expand_nodelist(value: Any) -> list[str]:
    entries = [value] if isinstance(value, str) else value
    if not isinstance(entries, list):
        raise _bad("execution.nodelist must be a list of hostlists")
    hosts: list[str] = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, str):
            raise _bad(f"execution.nodelist[{i}] must be a string")
        if _hostlist_bound(entry) + len(hosts) > MAX_NODES:
            raise ParseError("bad-hostlist", f"execution.nodelist[{i}] names more than "
                             f"{MAX_NODES} hosts")
        try:
            hosts.extend(expand_hostlist(entry))
        except (ValueError, RecursionError) as exc:
            raise ParseError("bad-hostlist", f"execution.nodelist[{i}] {entry!r}: {exc}"
                             ) from None
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
        lo, hi = (int(m.group(1)), int(m.group(2) or m.group(1))) if m else (1, 0)
        if hi < lo:
            raise _bad(f"{where} {value!r}: bad idset element {part!r}")
        spans.append((lo, hi))
    return _merge(spans)


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
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not math.isfinite(value) or value < 0):
        raise _bad(f"execution.{key} must be a number >= 0, not {value!r}")
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
    facts: dict[str, Any] = {"nnodes": _size(_merge(rank_spans)), "ncores": counts["core"]}
    if counts["gpu"]:
        facts["ngpus"] = counts["gpu"]
    if execution.get("nodelist") is not None:
        facts["nodelist"] = _expand_nodelist(execution["nodelist"])
    expiration = _time(execution, "expiration")
    _time(execution, "starttime")
    if expiration:
        facts["expiration"] = expiration
    return facts
