"""What Elasticsearch answered a dashboard query: which error it is, and whether it has data.

:mod:`pipeline.dashboards.check` runs the queries; this reads the answers. An error becomes
one reason word of the check's report (``missing-index``, ``unsupported-aggregation``,
``type-mismatch``, ``es-error``) and its first root cause; a response has data when some
bucket along the target's bucket aggregations holds a document with a metric value, as a
panel would show something.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["classify_error", "error_of", "has_data"]


def error_of(body: Any) -> Mapping[str, Any]:
    if isinstance(body, Mapping) and isinstance(body.get("error"), Mapping):
        return body["error"]
    return {}


def classify_error(error: Any, fallback: str) -> tuple[str, str]:
    """An Elasticsearch error -> (reason word, its first root cause)."""
    if not isinstance(error, Mapping):
        return "es-error", fallback
    roots = error.get("root_cause")
    cause: Mapping[str, Any] = error
    if isinstance(roots, list) and roots and isinstance(roots[0], Mapping):
        cause = roots[0]
    else:
        while isinstance(cause.get("caused_by"), Mapping):
            cause = cause["caused_by"]
    etype = str(cause.get("type") or "")
    text = str(cause.get("reason") or fallback)
    lowered = text.lower()
    if etype == "index_not_found_exception":
        reason = "missing-index"
    elif "aggregation" in lowered and ("unknown" in lowered or "not supported" not in lowered
                                       and "parse" in etype) or "script" in lowered:
        reason = "unsupported-aggregation"
    elif "fielddata" in lowered or "not supported for aggregation" in lowered \
            or "of type" in lowered or etype == "number_format_exception":
        reason = "type-mismatch"
    else:
        reason = "es-error"
    return reason, f"{etype}: {text}" if etype else text


def has_data(target: Mapping[str, Any], response: Mapping[str, Any]) -> bool:
    metrics = list(target.get("metrics") or [])
    first = metrics[0].get("type") if metrics else None
    if first in ("logs", "raw_data", "raw_document"):
        return bool((response.get("hits") or {}).get("hits"))
    bucket_ids = [str(b.get("id")) for b in target.get("bucketAggs") or []
                  if not (b.get("type") == "filters"
                          and not (b.get("settings") or {}).get("filters"))]
    return _level_has_data(response.get("aggregations") or {}, bucket_ids, metrics)


def _level_has_data(node: Mapping[str, Any], bucket_ids: Sequence[str],
                    metrics: Sequence[Mapping[str, Any]]) -> bool:
    if not bucket_ids:
        return _metrics_have_data(node, metrics)
    agg = node.get(bucket_ids[0]) or {}
    buckets = agg.get("buckets") or []
    if isinstance(buckets, Mapping):
        buckets = list(buckets.values())
    return any(b.get("doc_count", 0) > 0 and _level_has_data(b, bucket_ids[1:], metrics)
               for b in buckets)


def _metrics_have_data(bucket: Mapping[str, Any], metrics: Sequence[Mapping[str, Any]]
                       ) -> bool:
    for m in metrics:
        kind = m.get("type")
        if kind == "count":
            if bucket.get("doc_count", 0) > 0:
                return True
            continue
        value = bucket.get(str(m.get("id")))
        if not isinstance(value, Mapping):
            continue
        if kind == "percentiles":
            if any(v is not None for v in (value.get("values") or {}).values()):
                return True
        elif kind == "cardinality":
            if value.get("value"):
                return True
        elif value.get("value") is not None or value.get("count"):
            return True
    return False
