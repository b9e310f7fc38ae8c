"""Elasticsearch answers to data frames, as Grafana's Elasticsearch data source makes them.

A mirror of the backend of grafana/grafana-elasticsearch-datasource (the release
:data:`~pipeline.dashboards.grafana_query.PLUGIN_VERSION`, ``pkg/elasticsearch``:
``response_parser.go``, ``metrics_response_processor.go``, ``field_namer.go``,
``raw_response_processor.go``, ``logs_response_processor.go``,
``dataframe_builder.go``, ``response_utils.go``) for the query-builder targets
:func:`~pipeline.dashboards.grafana_query.build_search` sends, one ``_msearch`` answer
item at a time:

* the last bucket aggregation a ``date_histogram``: time series, one frame per metric (a
  percentile, a terms path above the histogram): a ``Time`` and a ``Value`` field, the
  terms keys as the value's labels, the series' name in ``displayNameFromDS`` (the alias,
  ``{{term field}}``, ``{{metric}}``, ``{{field}}`` filled in, else Grafana's default
  name: the labels' values, with the metric where several kinds are drawn). This is the
  form Grafana gives when the panel's queries go through server-side expressions
  (``keepLabelsInResponse``); without them it drops the labels and names the frame
  instead, which a panel shows the same;
* otherwise one table: a column per bucket level (the keys of the levels above sorted by
  field name, as Grafana sorts them), then one per metric (``Count``, ``Sum`` or, where
  two metrics share a type, ``Sum cores_req``; ``p50.0 wait_s``: Elasticsearch names
  percentiles ``50.0``);
* raw data and logs: the documents' flattened ``_source`` and ``fields``, the time field
  first as :attr:`FieldType.TIME` (then, for logs, the message field); raw document: one
  column of whole documents.

Empty answers come out as Grafana's: no frame for a table without buckets, nor for time
series under terms without buckets; a time series frame without rows for a count or
value metric over a histogram without buckets (none for percentiles); one frame without
fields for raw data or logs without hits.

Values: numbers as floats (``None`` where a bucket has none), times as epoch
milliseconds, booleans and objects as :attr:`FieldType.OTHER` with the Python value (the
JSON Grafana sends, parsed). Grafana's quirks are kept, each noted where it is mirrored.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from pipeline.dashboards.datasources import by_uid
from pipeline.dashboards.grafana_query import DEFAULT_SIZE, PIPELINE_AGGS
from pipeline.dashboards.preview.frames import (
    TIME_FIELD_NAME,
    VALUE_FIELD_NAME,
    Field,
    FieldType,
    Frame,
    number_text,
)

__all__ = ["FrameError", "frames_of"]

#: the names Grafana shows for metric types (models.go, metricAggType)
METRIC_NAMES = {
    "count": "Count", "avg": "Average", "sum": "Sum", "max": "Max", "min": "Min",
    "extended_stats": "Extended Stats", "percentiles": "Percentiles",
    "top_metrics": "Top Metrics", "cardinality": "Unique Count",
    "moving_avg": "Moving Average", "moving_fn": "Moving Function",
    "cumulative_sum": "Cumulative Sum", "derivative": "Derivative",
    "serial_diff": "Serial Difference", "bucket_script": "Bucket Script",
    "raw_document": "Raw Document", "raw_data": "Raw Data", "rate": "Rate", "logs": "Logs",
}
_EXTENDED_STATS = {
    "avg": "Avg", "min": "Min", "max": "Max", "sum": "Sum", "count": "Count",
    "std_deviation": "Std Dev", "std_deviation_bounds_upper": "Std Dev Upper",
    "std_deviation_bounds_lower": "Std Dev Lower",
}
_UNSUPPORTED_METRICS = frozenset({"extended_stats", "top_metrics"})
_DOCUMENT_KEYS = ("_id", "_type", "_index", "sort", "highlight")
_ALIAS = re.compile(r"\{\{([\s\S]+?)\}\}")
_SEARCH_WORDS = re.compile(r"@HIGHLIGHT@(.*?)@/HIGHLIGHT@")
_RFC3339 = re.compile(r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?"
                      r"(Z|[+-]\d{2}:\d{2})$")
#: flatten()'s depth limit in response_utils.go
_FLATTEN_DEPTH = 10


class FrameError(ValueError):
    """An answer the preview cannot turn into frames as Grafana would (a metric type it
    does not mirror, an Elasticsearch error item, a malformed bucket)."""


def frames_of(target: Mapping[str, Any], response: Mapping[str, Any], *,
              time_field: str | None = None, log_message_field: str | None = None,
              log_level_field: str = "") -> list[Frame]:
    """The frames Grafana makes of ``response``, the ``_msearch`` answer to ``target``.

    ``time_field`` and ``log_message_field`` are the data source's; by default the
    target's ``timeField`` and the message field of the jobstream data source the target
    names (:func:`~pipeline.dashboards.datasources.by_uid`)."""
    if response.get("error"):
        raise FrameError(f"query {target.get('refId')}: Elasticsearch error: "
                         f"{_error_reason(response['error'])}")
    source = by_uid(str((target.get("datasource") or {}).get("uid") or ""))
    if time_field is None:
        time_field = str(target.get("timeField") or (source.time_field if source else ""))
    if log_message_field is None:
        log_message_field = source.log_message_field if source else ""
    ref_id = str(target.get("refId") or "")
    metrics = list(target.get("metrics") or [])
    first = str(metrics[0].get("type")) if metrics else ""
    hits = list(((response.get("hits") or {}).get("hits")) or [])
    if first == "raw_data":
        return [_raw_data(ref_id, hits, time_field)]
    if first == "raw_document":
        return [_raw_document(ref_id, hits)]
    if first == "logs":
        return [_logs(ref_id, hits, metrics[0], response, time_field, log_message_field,
                      log_level_field)]
    return _MetricFrames(target).process(response.get("aggregations") or {})


def _error_reason(error: Any) -> str:
    if not isinstance(error, Mapping):
        return str(error)
    causes = error.get("root_cause") or [{}]
    for reason in (causes[0].get("reason") if isinstance(causes[0], Mapping) else None,
                   error.get("reason"), (error.get("caused_by") or {}).get("reason")):
        if reason:
            return str(reason)
    return "Unknown elasticsearch error response"


# --------------------------------------------------------------------------- metrics


class _MetricFrames:
    """processBuckets and its helpers: frames accumulated while walking the buckets."""

    def __init__(self, target: Mapping[str, Any]) -> None:
        self.target = target
        self.ref_id = str(target.get("refId") or "")
        self.buckets = list(target.get("bucketAggs") or [])
        self.metrics = list(target.get("metrics") or [])
        self.by_id = {str(b.get("id")): b for b in self.buckets}
        #: time series frames, or the one table frame (processAggregationDocs replaces
        #: the result by a table built on the fields made so far)
        self.frames: list[Frame] = []
        #: the labels of each time series frame before naming, by id(frame)
        self.tags: dict[int, dict[str, str]] = {}

    def process(self, aggs: Mapping[str, Any]) -> list[Frame]:
        self._walk(aggs, {}, 0)
        self._name_series()
        self._trim_edges()
        return self.frames

    def _walk(self, aggs: Mapping[str, Any], props: dict[str, str], depth: int) -> None:
        max_depth = len(self.buckets) - 1
        for agg_id in sorted(aggs):  # Go sorts the ids as strings
            agg_def = self.by_id.get(agg_id)
            agg = aggs[agg_id]
            if agg_def is None or not isinstance(agg, Mapping):
                continue  # doc_count, key, the metrics beside a terms order
            kind = agg_def.get("type")
            field = str(agg_def.get("field") or "")
            if kind == "nested":
                self._walk(agg, props, depth + 1)
                continue
            if depth == max_depth:
                if kind == "date_histogram":
                    self._series(agg, props)
                else:
                    self._table(agg, agg_def, props)
                continue
            buckets = agg.get("buckets")
            if isinstance(buckets, list):
                for bucket in buckets:
                    inner = dict(props)
                    key = _bucket_key_text(bucket)
                    if key is not None:
                        inner[field] = key
                    self._walk(bucket, inner, depth + 1)
            elif isinstance(buckets, Mapping):
                for key in sorted(buckets):
                    self._walk(buckets[key], {**props, "filter": key}, depth + 1)

    # ------------------------------------------------------------------ time series

    def _series(self, agg: Mapping[str, Any], props: dict[str, str]) -> None:
        buckets = [b for b in agg.get("buckets") or [] if isinstance(b, Mapping)]
        for metric in self.metrics:
            if metric.get("hide"):
                continue
            kind = str(metric.get("type"))
            mid = str(metric.get("id"))
            field = str(metric.get("field") or "")
            if kind in _UNSUPPORTED_METRICS:
                raise FrameError(f"query {self.ref_id}: metric {kind} is not drawn by the "
                                 "preview")
            if kind == "count":
                self._add_series({**props, "metric": "count"},
                                 [(_time_ms(b.get("key")), _cast_float(b.get("doc_count")))
                                  for b in buckets])
            elif kind == "percentiles":
                if not buckets:
                    continue
                first = (buckets[0].get(mid) or {}).get("values") or {}
                for name in sorted(first):
                    self._add_series(
                        {**props, "metric": "p" + name, "field": field},
                        [(_time_ms(b.get("key")),
                          _cast_float(((b.get(mid) or {}).get("values") or {}).get(name)))
                         for b in buckets])
            else:
                points = []
                for b in buckets:
                    time_ms = _time_ms(b.get("key"))
                    value = b.get(mid)
                    if not isinstance(value, Mapping):
                        continue  # Grafana skips the bucket, time and all
                    key = "normalized_value" if "normalized_value" in value else "value"
                    points.append((time_ms, _cast_float(value.get(key))))
                self._add_series({**props, "metric": kind, "field": field, "metricId": mid},
                                 points)

    def _add_series(self, tags: dict[str, str], points: list[tuple[int, float | None]]
                    ) -> None:
        frame = Frame(self.ref_id, [
            Field(TIME_FIELD_NAME, FieldType.TIME, [t for t, _ in points]),
            Field(VALUE_FIELD_NAME, FieldType.NUMBER, [v for _, v in points])],
            meta={"type": "timeseries-multi"})
        self.tags[id(frame)] = tags
        self.frames.append(frame)

    def _name_series(self) -> None:
        """nameFields: the series' names, the labels left being the bucket keys."""
        kinds = {tags["metric"] for tags in self.tags.values() if "metric" in tags}
        for frame in self.frames:
            tags = self.tags.get(id(frame))
            if tags is None:
                continue
            value = frame.fields[1]
            labels = dict(tags)
            value.config["displayNameFromDS"] = self._series_name(labels, len(kinds))
            value.labels = {k: labels[k] for k in sorted(labels)}

    def _series_name(self, labels: dict[str, str], kind_count: int) -> str:
        """getFieldName; takes the naming labels out of ``labels``."""
        kind = labels.pop("metric", "")
        name = _metric_name(kind)
        field = labels.pop("field", "")
        alias = str(self.target.get("alias") or "")
        if alias:
            # Grafana returns here, before it drops "metricId": with an alias a value
            # metric's series keeps that label (which server-side math joins on)
            shown = alias
            for match in _ALIAS.finditer(alias):
                group = match.group(1)
                if group.startswith("term "):
                    shown = shown.replace(match.group(0), labels.get(group[5:], ""), 1)
                if group in labels:
                    shown = shown.replace(match.group(0), labels[group], 1)
                if group == "metric":
                    shown = shown.replace(match.group(0), name, 1)
                if group == "field":
                    shown = shown.replace(match.group(0), field, 1)
            return shown
        if kind in PIPELINE_AGGS:
            name = self._pipeline_name(kind, name, field, labels.get("metricId", ""))
        elif field:
            name += " " + field
        labels.pop("metricId", None)
        if not labels:
            return name
        keys = "".join(labels[k] + " " for k in sorted(labels)).strip()
        return keys if kind_count == 1 else keys + " " + name

    def _pipeline_name(self, kind: str, name: str, field: str, metric_id: str) -> str:
        by_id = {str(m.get("id")): m for m in self.metrics}
        if kind == "bucket_script":
            metric = by_id.get(metric_id)
            if metric is None:
                return name
            script = str((metric.get("settings") or {}).get("script") or "")
            for var in metric.get("pipelineVariables") or []:
                ref = by_id.get(str(var.get("pipelineAgg")))
                if ref is not None:
                    script = script.replace("params." + str(var.get("name")),
                                            _describe(ref))
            return script
        if not field:
            return name
        ref = by_id.get(field)
        return name + " " + _describe(ref) if ref is not None else "Unset"

    # ------------------------------------------------------------------ tables

    def _table(self, agg: Mapping[str, Any], agg_def: Mapping[str, Any],
               props: dict[str, str]) -> None:
        """processAggregationDocs: rows appended to the one table frame."""
        buckets = agg.get("buckets")
        keys = sorted(props)
        key_field = str(agg_def.get("field") or "")
        if isinstance(buckets, list) and buckets:
            fields = self._table_fields(keys)
            for bucket in buckets:
                self._append_props(fields, props, keys, skip="")
                if key_field:
                    self._append_key(fields, key_field, bucket.get("key"))
                self._append_metrics(fields, bucket)
        elif isinstance(buckets, Mapping) and buckets:
            key_field = key_field or "filter"
            if "filter" not in keys:
                keys.append("filter")
            fields = self._table_fields(keys)
            for name in sorted(buckets):
                self._append_props(fields, {**props, "filter": name}, keys,
                                   skip="filter" if key_field == "filter" else "")
                _column(fields, key_field, FieldType.STRING).values.append(name)
                self._append_metrics(fields, buckets[name])
        else:
            # "no buckets present": Grafana drops whatever rows it had made
            self.frames = []
            return
        self.frames = [Frame(self.ref_id, fields)]

    def _table_fields(self, keys: Sequence[str]) -> list[Field]:
        fields = [f for frame in self.frames for f in frame.fields]
        have = {f.name for f in fields}
        fields += [Field(k, FieldType.STRING, []) for k in keys if k not in have]
        return fields

    @staticmethod
    def _append_props(fields: list[Field], props: Mapping[str, str], keys: Sequence[str],
                      skip: str) -> None:
        for f in fields:
            for key in keys:
                if key != skip and f.name == key:
                    f.values.append(props.get(key, ""))

    @staticmethod
    def _append_key(fields: list[Field], name: str, key: Any) -> None:
        if isinstance(key, str):
            _column(fields, name, FieldType.STRING).values.append(key)
        elif _is_number(key):
            _column(fields, name, FieldType.NUMBER).values.append(float(key))
        else:
            raise FrameError(f"bucket key {key!r} of {name} is neither a string nor a number")

    def _append_metrics(self, fields: list[Field], bucket: Mapping[str, Any]) -> None:
        for metric in self.metrics:  # hidden ones too: appendMetrics does not look
            kind = str(metric.get("type"))
            mid = str(metric.get("id"))
            field = str(metric.get("field") or "")
            if kind == "count":
                _column(fields, "Count", FieldType.NUMBER).values.append(
                    _cast_float(bucket.get("doc_count")))
            elif kind == "percentiles":
                values = (bucket.get(mid) or {}).get("values") or {}
                for name in sorted(values):
                    # MustFloat64: a missing percentile is 0 in a table
                    number = values[name]
                    _column(fields, f"p{name} {field}", FieldType.NUMBER).values.append(
                        float(number) if _is_number(number) else 0.0)
            elif kind in _UNSUPPORTED_METRICS:
                raise FrameError(f"query {self.ref_id}: metric {kind} is not drawn by the "
                                 "preview")
            else:
                _column(fields, self._column_name(metric), FieldType.NUMBER).values.append(
                    _cast_float((bucket.get(mid) or {}).get("value")))

    def _column_name(self, metric: Mapping[str, Any]) -> str:
        """addOtherMetricsToFields: the type's name, with the field where another metric
        has the same type, and the id where it has the same field too."""
        kind = str(metric.get("type"))
        field = str(metric.get("field") or "")
        name = _metric_name(kind)
        same = [m for m in self.metrics
                if str(m.get("id")) != str(metric.get("id")) and m.get("type") == kind]
        if same:
            name += " " + field
            if any(str(m.get("field") or "") == field for m in same):
                name += " " + str(metric.get("id"))
            if kind == "bucket_script":
                name = str((metric.get("settings") or {}).get("script") or "")
        return name

    # ------------------------------------------------------------------ trimEdges

    def _trim_edges(self) -> None:
        histogram = next((b for b in self.buckets if b.get("type") == "date_histogram"), None)
        if histogram is None:
            return
        trim = _cast_int((histogram.get("settings") or {}).get("trimEdges"))
        if not trim or trim < 0:
            return
        for frame in self.frames:
            for f in frame.fields:
                if len(f.values) > trim * 2:
                    del f.values[:trim]
                    del f.values[len(f.values) - trim:]


def _column(fields: list[Field], name: str, kind: FieldType) -> Field:
    """The field called ``name``, made (of ``kind``) at the end if there is none."""
    for f in fields:
        if f.name == name:
            return f
    made = Field(name, kind, [])
    fields.append(made)
    return made


def _metric_name(kind: str) -> str:
    return METRIC_NAMES.get(kind) or _EXTENDED_STATS.get(kind) or kind


def _describe(metric: Mapping[str, Any]) -> str:
    kind = str(metric.get("type"))
    text = METRIC_NAMES.get(kind, "")
    return text if kind == "count" else f"{text} {metric.get('field') or ''}"


def _bucket_key_text(bucket: Mapping[str, Any]) -> str | None:
    """A bucket's key as a label: a string as is, a number as an integer (Go's Int64
    truncates), ``key_as_string`` over both."""
    text: str | None = None
    key = bucket.get("key")
    if isinstance(key, str):
        text = key
    elif _is_number(key):
        text = str(int(key))
    key_as_string = bucket.get("key_as_string")
    if isinstance(key_as_string, str):
        text = key_as_string
    return text


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _cast_float(value: Any) -> float | None:
    """castToFloat: a number, or a numeric string; None for null, "NaN" and the rest."""
    if _is_number(value):
        return float(value)
    if isinstance(value, str):
        text = value
        # Go's ParseFloat takes neither padding nor digit separators, Python's does
        if text != text.strip() or "_" in text or text.lower() == "nan":
            return None
        try:
            number = float(text)
        except ValueError:
            return None
        return None if math.isnan(number) else number
    return None


def _cast_int(value: Any) -> int | None:
    if _is_number(value):
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def _time_ms(key: Any) -> int:
    if not _is_number(key):
        raise FrameError(f"date histogram bucket key {key!r} is not a number")
    return int(key)


# --------------------------------------------------------------------------- documents


def _flatten(source: Mapping[str, Any], depth: int = 0, prefix: str = "",
             out: dict[str, Any] | None = None) -> dict[str, Any]:
    """flatten(): nested objects to dotted keys, empty objects kept as they are."""
    out = {} if out is None else out
    for key, value in source.items():
        name = f"{prefix}.{key}".strip(".")
        if isinstance(value, Mapping) and value and depth < _FLATTEN_DEPTH:
            _flatten(value, depth + 1, name, out)
        else:
            out[name] = value
    return out


def _unwrap(value: Any) -> Any:
    return value[0] if isinstance(value, list) and len(value) == 1 else value


def _document(hit: Mapping[str, Any], *, flatten: bool) -> dict[str, Any]:
    doc: dict[str, Any] = {key: hit.get(key) for key in _DOCUMENT_KEYS}
    source = hit.get("_source")
    if isinstance(source, Mapping):
        doc.update(_flatten(source) if flatten else source)
    fields = hit.get("fields")
    if isinstance(fields, Mapping):
        doc.update({k: _unwrap(v) for k, v in fields.items()})
    return doc


def _sorted_names(names: Sequence[str], time_field: str, message_field: str) -> list[str]:
    """sortPropNames: the time field, then the message field (logs), then the rest in
    byte order."""
    rest = sorted(n for n in names if n not in (time_field, message_field))
    head = [n for n in (time_field, message_field) if n and n in names]
    return head + rest


def _document_fields(docs: Sequence[Mapping[str, Any]], names: Sequence[str],
                     time_field: str) -> list[Field]:
    """processDocsToDataFrameFields: a column's type is that of its first value that is
    not null; values of another type are null."""
    fields = []
    for name in names:
        values = [doc.get(name) for doc in docs]
        if name == time_field:
            fields.append(Field(name, FieldType.TIME, [_parse_time(v) for v in values]))
            continue
        sample = next((v for v in values if v is not None), None)
        if _is_number(sample):
            fields.append(Field(name, FieldType.NUMBER,
                                [float(v) if _is_number(v) else None for v in values]))
        elif isinstance(sample, str):
            fields.append(Field(name, FieldType.STRING,
                                [v if isinstance(v, str) else None for v in values]))
        elif isinstance(sample, bool):
            fields.append(Field(name, FieldType.OTHER,
                                [v if isinstance(v, bool) else None for v in values]))
        else:
            fields.append(Field(name, FieldType.OTHER, values))
    return fields


def _parse_time(value: Any) -> int | None:
    """Go's time.Parse(RFC3339Nano) of a string or a one-string list, to epoch ms."""
    value = _unwrap(value)
    if not isinstance(value, str):
        return None
    m = _RFC3339.match(value)
    if not m:
        return None
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    zone = m.group(8)
    try:
        when = datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    except ValueError:
        return None
    ms = int(when.timestamp()) * 1000 + int(((m.group(7) or "") + "000")[:3])
    if zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        ms -= sign * (int(zone[1:3]) * 60 + int(zone[4:6])) * 60_000
    return ms


def _raw_data(ref_id: str, hits: Sequence[Mapping[str, Any]], time_field: str) -> Frame:
    docs = [_document(hit, flatten=True) for hit in hits]
    names = _sorted_names(list({k: None for doc in docs for k in doc}), time_field, "")
    return Frame(ref_id, _document_fields(docs, names, time_field))


def _raw_document(ref_id: str, hits: Sequence[Mapping[str, Any]]) -> Frame:
    docs = [_document(hit, flatten=False) for hit in hits]
    return Frame(ref_id, [Field(ref_id, FieldType.OTHER, docs)], name=ref_id)


def _logs(ref_id: str, hits: Sequence[Mapping[str, Any]], metric: Mapping[str, Any],
          response: Mapping[str, Any], time_field: str, message_field: str,
          level_field: str) -> Frame:
    docs: list[dict[str, Any]] = []
    words: set[str] = set()
    for hit in hits:
        source = hit.get("_source")
        flat = _flatten(source) if isinstance(source, Mapping) else None
        doc: dict[str, Any] = {key: hit.get(key) for key in _DOCUMENT_KEYS}
        # the whole flattened source as one string, the log line the Logs panel shows
        doc["_source"] = _go_json(flat) if flat is not None else ""
        for key, value in (flat or {}).items():
            doc[key] = value
            if level_field and key == level_field:
                doc["level"] = value
        fields = hit.get("fields")
        if isinstance(fields, Mapping):
            doc.update({k: _unwrap(v) for k, v in fields.items()})
        if "id" not in doc:
            doc["id"] = f"{_go_text(doc['_index'])}#{_go_text(doc['_id'])}"
        highlight = doc.get("highlight")
        if isinstance(highlight, Mapping):
            for entries in highlight.values():
                for entry in entries if isinstance(entries, list) else []:
                    words.update(_SEARCH_WORDS.findall(_go_text(entry)))
        docs.append(doc)
    names = _sorted_names(list({k: None for doc in docs for k in doc}), time_field,
                          message_field)
    limit = (metric.get("settings") or {}).get("limit")
    total = (response.get("hits") or {}).get("total")
    meta = {"preferredVisualisationType": "logs", "custom": {
        "searchWords": sorted(words),
        "limit": _size(limit),
        "total": int(total.get("value") or 0) if isinstance(total, Mapping)
        else int(total) if _is_number(total) else 0}}
    return Frame(ref_id, _document_fields(docs, names, time_field), meta=meta)


def _size(value: Any) -> int:
    """stringToIntWithDefaultValue of a setting read with MustString (a number is no
    string, hence the default)."""
    if not isinstance(value, str):
        return DEFAULT_SIZE
    try:
        number = int(value)
    except ValueError:
        return DEFAULT_SIZE
    return number or DEFAULT_SIZE


def _go_text(value: Any) -> str:
    """fmt's %v of what occurs here (``_index``, ``_id``, highlight fragments: strings;
    nil where Elasticsearch left one out)."""
    if value is None:
        return "<nil>"
    return value if isinstance(value, str) else str(value)


def _go_json(value: Any) -> str:
    """encoding/json's Marshal of a decoded value: keys sorted, no spaces, numbers as
    float64 (``5``, not ``5.0``), and <, >, & escaped."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if _is_number(value):
        return number_text(float(value))
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{_go_json(str(k))}:{_go_json(value[k])}"
                              for k in sorted(value)) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_go_json(v) for v in value) + "]"
    text = json.dumps(str(value), ensure_ascii=False)
    for char, escaped in _GO_ESCAPES:
        text = text.replace(char, escaped)
    return text


_GO_ESCAPES = (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
               ("\u2028", "\\u2028"), ("\u2029", "\\u2029"))
