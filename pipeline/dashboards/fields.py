"""Which index fields a panel target uses, and whether the mapping suits each use (pure).

Elasticsearch does not always fail a query with a bad field: a ``query_string`` on an
unknown field, or a sum over an unmapped one, just finds nothing, and the panel is silently
empty. So every field a target names is looked up in the index's field capabilities, and
each use has the types it needs (a ``terms`` aggregation on a ``text`` field, a
percentile of a ``keyword``, a date histogram on a number are type mismatches).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["FieldUse", "check_use", "field_types", "field_uses", "query_fields"]

NUMERIC = frozenset({"long", "integer", "short", "byte", "double", "float", "half_float",
                     "scaled_float", "unsigned_long"})
DATES = frozenset({"date", "date_nanos"})
#: Types with doc values a bucket or cardinality aggregation can group by.
GROUPABLE = NUMERIC | DATES | {"keyword", "constant_keyword", "wildcard", "boolean", "ip",
                               "version"}
NUMERIC_RANGES = frozenset({"integer_range", "long_range", "float_range", "double_range"})

#: use -> the field types it accepts
ACCEPTS: Mapping[str, frozenset[str]] = {
    "terms": GROUPABLE,
    "cardinality": GROUPABLE,
    "date_histogram": DATES | {"date_range"},
    "histogram": NUMERIC | NUMERIC_RANGES,
    "sum": NUMERIC,
    "percentiles": NUMERIC | DATES,
    "extended_stats": NUMERIC,
    "avg": NUMERIC | DATES,
    "min": NUMERIC | DATES,
    "max": NUMERIC | DATES,
    "time field": DATES,
}

#: a flattened field's subfields hold keywords
_FLATTENED_LEAF = frozenset({"keyword"})


@dataclass(frozen=True)
class FieldUse:
    """``field`` used as ``use`` (an aggregation type, ``time field`` or ``query``)."""

    field: str
    use: str


_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"')
_FIELD = re.compile(r"(?<![\w.@\\-])([A-Za-z_@][\w.@-]*)\s*:")
_EXISTS = re.compile(r"_exists_\s*:\s*([A-Za-z_@][\w.@-]*)")


def query_fields(lucene: str) -> list[str]:
    """Field names a Lucene query string searches (``field:value``, ``_exists_:field``)."""
    text = _QUOTED.sub('""', lucene)
    names = [m.group(1) for m in _FIELD.finditer(text)]
    names += _EXISTS.findall(text)
    return [n for n in dict.fromkeys(names) if n != "_exists_"]


def field_uses(target: Mapping[str, Any], time_field: str) -> list[FieldUse]:
    """Every field ``target`` (variables substituted) uses, with how."""
    uses = [FieldUse(time_field, "time field")]
    for bucket in target.get("bucketAggs") or []:
        kind = str(bucket.get("type"))
        field = str(bucket.get("field") or "")
        if kind in ("terms", "histogram", "date_histogram") and field:
            uses.append(FieldUse(field, kind))
        if kind == "filters":
            for entry in (bucket.get("settings") or {}).get("filters") or []:
                uses += [FieldUse(f, "query") for f in query_fields(str(entry.get("query")))]
    for metric in target.get("metrics") or []:
        kind = str(metric.get("type"))
        field = str(metric.get("field") or "")
        if kind in ACCEPTS and field:
            uses.append(FieldUse(field, kind))
    uses += [FieldUse(f, "query") for f in query_fields(str(target.get("query") or ""))]
    return list(dict.fromkeys(uses))


def field_types(field_caps: Mapping[str, Any]) -> dict[str, frozenset[str]]:
    """``_field_caps`` response -> field name -> its types (several when indices differ)."""
    fields = field_caps.get("fields") or {}
    return {name: frozenset(t for t in caps if t != "unmapped")
            for name, caps in fields.items()}


def _resolve(field: str, types: Mapping[str, frozenset[str]]) -> frozenset[str] | None:
    found = types.get(field)
    if found:
        return found
    parts = field.split(".")
    for i in range(len(parts) - 1, 0, -1):
        parent = types.get(".".join(parts[:i]))
        if parent and "flattened" in parent:
            return _FLATTENED_LEAF
    return None


def check_use(use: FieldUse, types: Mapping[str, frozenset[str]]) -> tuple[str, str] | None:
    """None if the mapping suits the use, else ``(reason word, message)``."""
    if use.field in ("*", "_id", "_index"):
        return None
    found = _resolve(use.field, types)
    if found is None:
        return "unknown-field", f"field {use.field!r} ({use.use}) is not in the mapping"
    accepted = ACCEPTS.get(use.use)
    if accepted is None:  # a query searches any mapped field
        return None
    bad = sorted(found - accepted)
    if bad:
        return ("type-mismatch",
                f"field {use.field!r} is {'/'.join(bad)}; {use.use} needs "
                f"{_describe(accepted)}")
    return None


def _describe(types: frozenset[str]) -> str:
    for name, group in (("a keyword, number, date, boolean or ip field", GROUPABLE),
                        ("a number or a date", NUMERIC | DATES),
                        ("a number", NUMERIC), ("a date", DATES)):
        if types == group:
            return name
    return "a field of type " + "/".join(sorted(types))
