"""What Grafana's Elasticsearch data source sends for a panel target (pure).

A mirror of the data source's backend, grafana/grafana-elasticsearch-datasource
:data:`PLUGIN_VERSION` (``pkg/elasticsearch``: ``data_query_processor.go``,
``aggregation_factory.go``, ``auto_interval.go``, ``client/aggregation_builder.go``,
``client/search_request.go``, ``client/models.go``, ``client/request_encoder.go``), for the
query-builder targets (metrics, logs, raw data, raw document); raw DSL and ES|QL queries
are out of scope. Checked against the plugin's own golden request fixtures by
``tests/unit/test_grafana_fixtures.py``. Per target, one ``_msearch`` header and body:

* a ``bool`` filter: a range on the data source's time field (epoch milliseconds) and the
  target's Lucene query as ``query_string`` (none when blank);
* bucket aggregations nested in the order of the target, metrics inside the innermost;
  ``date_histogram`` with a fixed interval (``auto`` becomes the panel's interval, widened
  when terms or filters above it would exceed Elasticsearch's bucket limit),
  ``extended_bounds`` of the time range; ``terms`` with size, order (by term value, i.e.
  ``_key``, unless told otherwise) and min_doc_count (an order by a metric adds that
  metric beside the next level, as Grafana does);
* raw data, raw document and logs: documents sorted on ``_doc`` and the time field, in the
  order Grafana's JSON encoder happens to write them (see :func:`_sort`).

Template variables are substituted first (:func:`substitute`): Grafana's frontend does
that before the backend builds anything. Times, the panel's ``auto`` interval and Go's
durations are :mod:`pipeline.dashboards.grafana_time`'s; widening that interval for the
bucket limit stays here, beside the buckets it counts. The module is long because it
mirrors the plugin's request building function for function, kept whole so that the two
read side by side.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pipeline.dashboards.grafana_time import QueryError, TimeRange, go_duration

__all__ = [
    "MAX_TOTAL_BUCKETS",
    "PLUGIN_VERSION",
    "DEFAULT_SIZE",
    "PIPELINE_AGGS",
    "build_search",
    "clamp_auto_interval_ms",
    "lucene_escape",
    "lucene_values",
    "substitute",
    "variable_values",
]

#: The release of grafana/grafana-elasticsearch-datasource whose request building this
#: module mirrors (grafana/README.md says which Grafana ships it).
PLUGIN_VERSION = "12.8.0"

#: Grafana's default size of terms, raw data and logs queries.
DEFAULT_SIZE = 500

PIPELINE_AGGS = frozenset({"moving_avg", "moving_fn", "derivative", "serial_diff",
                           "cumulative_sum", "bucket_script"})
_MULTI_PATH_PIPELINE_AGGS = frozenset({"bucket_script"})
_INLINE_SCRIPT_METRICS = frozenset({"avg", "sum", "min", "max", "percentiles",
                                    "extended_stats", "cardinality"})
_CALENDAR_INTERVALS = frozenset({"1w", "1M", "1q", "1y"})
_HIGHLIGHT = {"fields": {"*": {}}, "pre_tags": ["@HIGHLIGHT@"], "post_tags": ["@/HIGHLIGHT@"],
              "fragment_size": 2147483647}



def variable_values(dashboard: Mapping[str, Any],
                    options: Mapping[str, Sequence[str]] | None = None) -> dict[str, str]:
    """What each template variable stands for in a check: "All" where the variable offers
    it, else its current value.

    "All" is the variable's custom all value when it has one, written as it is (Grafana
    does not format a custom all value). Without one Grafana writes the variable's values
    themselves, in the data source's format (:func:`lucene_values`): ``options`` gives
    them by variable name (the check asks Elasticsearch, as Grafana's variable query
    would); a variable missing from ``options`` stands for ``*``, an approximation for
    callers that ask no server (its field still gets checked)."""
    out: dict[str, str] = {}
    for var in dashboard.get("templating", {}).get("list", []):
        name = var.get("name")
        if not name:
            continue
        if var.get("includeAll"):
            custom = var.get("allValue")
            if custom:
                out[name] = str(custom)
            elif options is not None and name in options:
                out[name] = lucene_values(options[name])
            else:
                out[name] = "*"
            continue
        value = (var.get("current") or {}).get("value", var.get("query", ""))
        if isinstance(value, list):
            value = value[0] if value else ""
        out[name] = str(value)
    return out


#: The characters Grafana's ``luceneEscape`` escapes (public/app/features/templating or
#: @grafana/scenes, interpolation/formatRegistry.ts).
_LUCENE_SPECIAL = re.compile(r'([!*+\-=<>\s&|()\[\]{}^~?:\\/"])')


def lucene_escape(value: str) -> str:
    return _LUCENE_SPECIAL.sub(r"\\\1", value)


def lucene_values(values: Sequence[str]) -> str:
    """A list of values as Grafana's ``lucene`` format writes it, the Elasticsearch data
    source's format for a variable in a query (formatRegistry.ts): each value escaped and
    quoted, OR'ed in parentheses (one value too: ``("a")``), and ``__empty__`` for none,
    which matches nothing."""
    if not values:
        return "__empty__"
    return "(" + " OR ".join(f'"{lucene_escape(v)}"' for v in values) + ")"


def substitute(obj: Any, values: Mapping[str, str]) -> Any:
    """``obj`` with ``$name``, ``${name}``, ``${name:format}`` and ``[[name]]`` of the
    given variables replaced in every string (other ``$`` words are left alone)."""
    if not values:
        return obj
    names = "|".join(re.escape(n) for n in sorted(values, key=len, reverse=True))
    pattern = re.compile(r"\$\{(" + names + r")(?::[^}]*)?\}|\[\[(" + names + r")\]\]"
                         r"|\$(" + names + r")(?![\w])")

    def walk(node: Any) -> Any:
        if isinstance(node, str):
            return pattern.sub(lambda m: values[m.group(1) or m.group(2) or m.group(3)], node)
        if isinstance(node, list):
            return [walk(v) for v in node]
        if isinstance(node, dict):
            return {k: walk(v) for k, v in node.items()}
        return node

    return walk(obj)


def build_search(target: Mapping[str, Any], *, index: str, time_field: str,
                 time_range: TimeRange, interval_ms: int
                 ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``_msearch`` header and body Grafana sends for ``target`` (variables already
    substituted). Raises :class:`QueryError` for a target Grafana refuses."""
    metrics = list(target.get("metrics") or [])
    buckets = list(target.get("bucketAggs") or [])
    first = metrics[0].get("type") if metrics else None
    if not buckets and first not in ("logs", "raw_data", "raw_document"):
        raise QueryError("invalid query, missing metrics and aggregations")
    if target.get("queryType") not in (None, "", "lucene"):
        raise QueryError(f"query type {target.get('queryType')!r} is not checked "
                         "(only query-builder targets are)")

    filters: list[dict[str, Any]] = [{"range": {time_field: {
        "lte": time_range.to_ms, "gte": time_range.from_ms, "format": "epoch_millis"}}}]
    query = str(target.get("query") or "")
    if query.strip():
        filters.append({"query_string": {"query": query, "analyze_wildcard": True}})
    body: dict[str, Any] = {"size": 0, "query": {"bool": {
        "filter": filters[0] if len(filters) == 1 else filters}}}

    if first == "logs":
        _logs(body, metrics[0], time_field, time_range)
    elif first in ("raw_data", "raw_document"):
        _documents(body, metrics[0], time_field)
    else:
        aggs = _time_series_aggs(metrics, buckets, time_field, time_range)
        if aggs:
            body["aggs"] = aggs
    header = {"search_type": "query_then_fetch", "ignore_unavailable": True, "index": index}
    # data_query_processor.go widens the interval of every target, documents included
    interval_ms = clamp_auto_interval_ms(buckets, time_range, interval_ms)
    return header, _encode_intervals(body, interval_ms)


# --------------------------------------------------------------------------- documents


def _sort(time_field: str, order: str) -> dict[str, Any]:
    """The sort of logs and document queries, as Grafana puts it on the wire.

    The plugin keeps the sort in a Go map (``client/search_request.go``, ``Sort``) that
    ``encoding/json`` writes with its keys sorted, and Elasticsearch applies the keys of a
    sort object in the order it reads them. So a time field that sorts after ``_``
    (``t_submit``, ``timestamp``) is only the tie-breaker after ``_doc`` (index order),
    while ``@timestamp`` (``@`` < ``_``) really sorts by time. Mirrored as is: a panel
    that needs the newest documents must not rely on this sort (see the dashboards).
    """
    entries = {time_field: {"order": order, "unmapped_type": "boolean"},
               "_doc": {"order": order}}
    return {key: entries[key] for key in sorted(entries)}


def _logs(body: dict[str, Any], metric: Mapping[str, Any], time_field: str,
          time_range: TimeRange) -> None:
    settings = metric.get("settings") or {}
    order = "asc" if settings.get("sortDirection") == "asc" else "desc"
    body["sort"] = _sort(time_field, order)
    body["docvalue_fields"] = [time_field]
    body["script_fields"] = {}
    body["fields"] = [{"field": time_field, "format": "strict_date_optional_time_nanos"}]
    body["size"] = _int_or_default(settings.get("limit"), DEFAULT_SIZE)
    body["highlight"] = json.loads(json.dumps(_HIGHLIGHT))
    body["aggs"] = {"1": {"date_histogram": _date_histogram(
        {"interval": "auto"}, time_field, time_range)}}


def _documents(body: dict[str, Any], metric: Mapping[str, Any], time_field: str) -> None:
    settings = metric.get("settings") or {}
    body["sort"] = _sort(time_field, "desc")
    body["docvalue_fields"] = [time_field]
    body["script_fields"] = {}
    if metric.get("type") == "raw_data":
        body["fields"] = [{"field": time_field, "format": "strict_date_optional_time_nanos"}]
    body["size"] = _int_or_default(settings.get("size"), DEFAULT_SIZE)


# --------------------------------------------------------------------------- time series


def _time_series_aggs(metrics: Sequence[Mapping[str, Any]], buckets: Sequence[Mapping[str, Any]],
                      time_field: str, time_range: TimeRange) -> dict[str, Any]:
    root: dict[str, Any] = {}
    level = root  # the aggs object new aggregations go into
    for bucket in buckets:
        settings = _dsl_settings(bucket.get("settings"))
        kind = bucket.get("type")
        bid = str(bucket.get("id"))
        field = str(bucket.get("field") or "")
        child: dict[str, Any] = {}
        if kind == "date_histogram":
            node: dict[str, Any] = {"date_histogram": _date_histogram(settings, field or time_field,
                                                                      time_range)}
        elif kind == "histogram":
            node = {"histogram": _histogram(settings, field)}
        elif kind == "terms":
            node = {"terms": _terms(settings, field, metrics, child)}
        elif kind == "filters":
            entries = settings.get("filters") or []
            queries = {}
            for entry in entries:
                q = str(entry.get("query") or "")
                queries[str(entry.get("label") or q)] = {
                    "query_string": {"query": q, "analyze_wildcard": True}}
            if not queries:
                continue  # Grafana adds nothing for an empty filters group
            node = {"filters": {"filters": queries}}
        elif kind == "geohash_grid":
            node = {"geohash_grid": {"field": field, "precision": _int_or_default(
                settings.get("precision"), 3)}}
        elif kind == "nested":
            node = {"nested": {"path": field}}
        else:
            raise QueryError(f"unknown bucket aggregation type {kind!r}")
        node["aggs"] = child
        level[bid] = node
        level = child
    for metric in metrics:
        kind = str(metric.get("type"))
        mid = str(metric.get("id"))
        if kind == "count":
            continue
        if kind in PIPELINE_AGGS:
            pipeline = _pipeline(metric, metrics)
            if pipeline is not None:
                level[mid] = {kind: pipeline}
            continue
        level[mid] = {kind: _metric_body(metric)}
    _drop_empty_aggs(root)
    return root


def _drop_empty_aggs(aggs: dict[str, Any]) -> None:
    # Grafana leaves "aggs" out of an aggregation without sub-aggregations.
    for node in aggs.values():
        sub = node.get("aggs")
        if sub is not None:
            if sub:
                _drop_empty_aggs(sub)
            else:
                del node["aggs"]


def _date_histogram(settings: Mapping[str, Any], field: str, time_range: TimeRange
                    ) -> dict[str, Any]:
    interval = str(settings.get("interval") or "auto")
    out: dict[str, Any] = {"field": field}
    if interval in _CALENDAR_INTERVALS:
        out["calendar_interval"] = interval
    else:
        out["fixed_interval"] = "$__interval_msms" if interval == "auto" else interval
    out["min_doc_count"] = _int_or(settings.get("min_doc_count"), 0)
    out["extended_bounds"] = {"min": time_range.from_ms, "max": time_range.to_ms}
    out["format"] = str(settings.get("format") or "epoch_millis")
    for key, name in (("offset", "offset"), ("missing", "missing")):
        if isinstance(settings.get(key), str):
            out[name] = settings[key]
    tz = settings.get("timeZone")
    if isinstance(tz, str) and tz != "utc":
        out["time_zone"] = tz
    return out


def _histogram(settings: Mapping[str, Any], field: str) -> dict[str, Any]:
    out: dict[str, Any] = {"field": field,
                           "interval": _float_or_default(settings.get("interval"), 1000.0),
                           "min_doc_count": _int_or(settings.get("min_doc_count"), 0)}
    missing = settings.get("missing")
    if isinstance(missing, int) or (isinstance(missing, str) and missing.lstrip("-").isdigit()):
        out["missing"] = int(missing)
    return out


_METRIC_ID = re.compile(r"^(\d+)")


def _terms(settings: Mapping[str, Any], field: str, metrics: Sequence[Mapping[str, Any]],
           child: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"field": field, "size": _terms_size(settings.get("size"))}
    order: dict[str, Any] = {}
    order_by = settings.get("orderBy")
    direction = settings.get("order") if isinstance(settings.get("order"), str) else "desc"
    if isinstance(order_by, str) and order_by:
        m = _METRIC_ID.match(order_by)
        if m:
            ordered = next((x for x in metrics if str(x.get("id")) == m.group(1)), None)
            if ordered is not None:
                if ordered.get("type") == "count":
                    order["_count"] = direction
                else:
                    order[order_by] = direction
                    # the metric must exist at this level to order by it (no settings)
                    body = {"field": ordered["field"]} if ordered.get("field") else {}
                    child[str(ordered["id"])] = {str(ordered["type"]): body}
        else:
            order[order_by] = direction
    else:
        # A target saved without ordering options means what the editor shows for it:
        # term value, descending (aggregation_factory.go, addTermsAgg), not
        # Elasticsearch's own default of doc count.
        order["_term"] = direction
    if "_term" in order:
        # "_term" is the editor's word; Elasticsearch 7+ calls it "_key"
        # (client/aggregation_builder.go, Terms).
        order["_key"] = order.pop("_term")
    if order:
        out["order"] = order
    min_doc_count = settings.get("min_doc_count")
    if isinstance(min_doc_count, int) and not isinstance(min_doc_count, bool):
        out["min_doc_count"] = min_doc_count
    if isinstance(settings.get("missing"), str):
        out["missing"] = settings["missing"]
    return out


def _metric_body(metric: Mapping[str, Any]) -> dict[str, Any]:
    settings = dict(metric.get("settings") or {})
    kind = metric.get("type")
    if kind == "serial_diff" and "lag" in settings:
        settings["lag"] = _float_or_default(settings["lag"], settings["lag"])
    if kind in _INLINE_SCRIPT_METRICS:
        script = settings.get("script")
        if isinstance(script, dict) and isinstance(script.get("inline"), str):
            settings["script"] = script["inline"]
    out: dict[str, Any] = {}
    if metric.get("field"):
        out["field"] = metric["field"]
    out.update({k: v for k, v in settings.items() if k and v is not None})
    return out


def _pipeline(metric: Mapping[str, Any], metrics: Sequence[Mapping[str, Any]]
              ) -> dict[str, Any] | None:
    """A pipeline aggregation's body, or None where Grafana leaves it out."""
    by_id = {str(m.get("id")): m for m in metrics}

    def path(ref: str) -> str | None:
        if not ref.isdigit() or ref not in by_id:
            return None
        return "_count" if by_id[ref].get("type") == "count" else ref

    settings = {k: v for k, v in dict(metric.get("settings") or {}).items()
                if k and v is not None}
    if metric.get("type") in _MULTI_PATH_PIPELINE_AGGS:
        variables = metric.get("pipelineVariables") or []
        paths = {}
        for var in variables:
            resolved = path(str(var.get("pipelineAgg", "")))
            if resolved is not None:
                paths[str(var.get("name"))] = resolved
        if not variables:
            return None
        return {"buckets_path": paths, **settings}
    resolved = path(str(metric.get("field") or metric.get("pipelineAgg") or ""))
    if resolved is None:
        return None
    return {"buckets_path": resolved, **settings}


# --------------------------------------------------------------------------- helpers


def _dsl_settings(settings: Any) -> dict[str, Any]:
    """Bucket settings as the backend sends them: ``min_doc_count`` as an integer."""
    out = dict(settings or {})
    value = out.get("min_doc_count")
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        out["min_doc_count"] = int(value)
    return out


def _int_or(value: Any, default: int) -> int:
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return default


def _int_or_default(value: Any, default: int) -> int:
    """Grafana's stringToIntWithDefaultValue: unparsable or 0 -> default."""
    try:
        number = int(str(value))
    except ValueError:
        return default
    return number or default


def _float_or_default(value: Any, default: float) -> float:
    try:
        number = float(str(value))
    except ValueError:
        return default
    return number or default


def _encode_intervals(body: dict[str, Any], interval_ms: int) -> dict[str, Any]:
    """Grafana's request encoder (``client/request_encoder.go``): ``$__interval_ms`` and
    ``$__interval`` replaced in the serialized body (so ``$__interval_msms`` becomes
    ``60000ms``). Only the former falls back to 1 s for a zero interval; the latter is
    Go's rendering of the interval as it is (``0s``)."""
    ms = interval_ms if interval_ms > 0 else 1000
    text = json.dumps(body)
    text = text.replace("$__interval_ms", str(ms)).replace("$__interval",
                                                          go_duration(interval_ms))
    return json.loads(text)


# --------------------------------------------------------------------------- auto interval

#: Elasticsearch's ``search.max_buckets`` as the plugin assumes it (65,535 in 7.x,
#: 65,536 in 8.x and later: the lower one is safe on both).
MAX_TOTAL_BUCKETS = 65_535

# The fixed intervals a widened auto interval is rounded up to (beyond: whole days).
_NICE_INTERVALS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500,
                      1_000, 2_000, 5_000, 10_000, 15_000, 30_000,
                      60_000, 120_000, 300_000, 600_000, 900_000, 1_800_000,
                      3_600_000, 7_200_000, 10_800_000, 21_600_000, 43_200_000, 86_400_000)


def clamp_auto_interval_ms(buckets: Sequence[Mapping[str, Any]], time_range: TimeRange,
                           interval_ms: int) -> int:
    """The interval Grafana actually uses for a target's ``auto`` date histogram.

    Mirrors ``clampAutoInterval`` (``auto_interval.go``): the panel interval only accounts
    for range / max data points, but every terms or filters bucket above the histogram
    multiplies its buckets (``min_doc_count`` 0 and ``extended_bounds`` materialise all
    of them), so the interval is widened until the total fits ``search.max_buckets``.
    Explicit intervals, histogram and geohash multipliers are left alone, and so is a
    multiplier that alone exceeds the limit (Elasticsearch then refuses, as with Grafana).
    """
    if not any(b.get("type") == "date_histogram" and _interval_setting(b) == "auto"
               for b in buckets):
        return interval_ms
    multiplier = 1
    for b in buckets:
        if b.get("type") == "terms":
            size = _terms_size((b.get("settings") or {}).get("size"))
            multiplier *= size if size > 0 else DEFAULT_SIZE
        elif b.get("type") == "filters":
            entries = (b.get("settings") or {}).get("filters")
            if isinstance(entries, list) and entries:
                multiplier *= len(entries)
        if multiplier > MAX_TOTAL_BUCKETS:
            return interval_ms
    if multiplier <= 1 or time_range.span_ms <= 0:
        return interval_ms
    # time buckets allowed per parent bucket, one per level kept for the parents
    budget = MAX_TOTAL_BUCKETS // multiplier - len(buckets)
    if budget <= 2:  # no interval fits: up to span / interval + 2 buckets
        return interval_ms
    effective = interval_ms if interval_ms > 0 else 1000
    if time_range.span_ms // effective + 2 <= budget:
        return interval_ms
    floor_ms = -(-time_range.span_ms // (budget - 2))
    for nice in _NICE_INTERVALS_MS:
        if nice >= floor_ms:
            return nice
    return -(-floor_ms // 86_400_000) * 86_400_000


def _interval_setting(bucket: Mapping[str, Any]) -> str:
    value = (bucket.get("settings") or {}).get("interval", "auto")
    return value if isinstance(value, str) else "auto"


def _terms_size(size: Any) -> int:
    """A terms size as the plugin reads it (``termsAggSize``): a JSON number as is,
    anything else through stringToIntWithDefaultValue."""
    if isinstance(size, int) and not isinstance(size, bool):
        return size
    return _int_or_default(size, DEFAULT_SIZE)
