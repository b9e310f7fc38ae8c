"""The panel transformations the dashboards use, as Grafana's frontend applies them.

Mirrors of grafana/grafana ``packages/grafana-data/src/transformations/transformers``
(the frontend of Grafana 12/13), applied in order, disabled ones skipped:

* ``organize`` (``organize.ts``, ``filterByName.ts``, ``order.ts``, ``rename.ts``):
  ``includeByName`` keeps only the fields named there (none listed: all),
  ``excludeByName`` drops fields, a frame left without fields is dropped;
  ``indexByName`` orders fields (unlisted ones after, in their order; the default
  ``orderByMode`` manual); ``renameByName`` sets the field's ``displayName``. Fields are
  matched by the name the panel shows (or by their own name);
* ``sortBy`` (``sortBy.ts``, ``fieldComparers.ts``): the rows by the first ``sort``
  entry's field, ``desc`` reversing; numbers as numbers (null as 0, as JavaScript
  subtracts it), strings in collation order with empty ones last, times by timestamp;
* ``limit`` (``limit.ts``): the first ``limitField`` rows (10 if unset) of each frame;
* ``joinByField`` (``joinByField.ts``, ``joinDataFrames.ts``): several frames joined on
  the field ``byField`` (the first time field if unset), ``outer`` (the default) or
  ``inner``; one frame is left as it is;
* ``transpose`` (``transpose.ts``): fields become rows; the first field's values name
  the new columns when it holds strings or times.

Where a panel shows a name Grafana derives (a transposed column's label), it is put in
``displayNameFromDS`` so that
:attr:`~pipeline.dashboards.preview.frames.Field.display_name` shows it. Any other
transformation id raises :class:`TransformError` naming it.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pipeline.dashboards.preview.frames import (
    VALUE_FIELD_NAME,
    Field,
    FieldType,
    Frame,
    number_text,
    panel_display_name,
)

__all__ = ["TransformError", "apply"]

_DEFAULT_LIMIT = 10


class TransformError(ValueError):
    """A transformation (or option) the preview does not apply."""


def apply(transformations: Sequence[Mapping[str, Any]], frames: list[Frame]) -> list[Frame]:
    """``frames`` after the panel's ``transformations``, in order."""
    for transformation in transformations:
        if transformation.get("disabled"):
            continue
        kind = str(transformation.get("id") or "")
        step = _STEPS.get(kind)
        if step is None:
            raise TransformError(f"transformation {kind!r} is not supported by the preview")
        frames = step(dict(transformation.get("options") or {}), frames)
    return frames


def _copy(frame: Frame, fields: list[Field] | None = None) -> Frame:
    return Frame(frame.ref_id, list(frame.fields) if fields is None else fields, frame.name,
                 dict(frame.meta))


def _matches(names: set[str], fld: Field, frame: Frame, frames: Sequence[Frame]) -> bool:
    """nameMatcher's byNames: the shown name, or the field's own name."""
    return panel_display_name(fld, frame, frames) in names or fld.name in names


# --------------------------------------------------------------------------- organize


def _organize(options: dict[str, Any], frames: list[Frame]) -> list[Frame]:
    mode = options.get("orderByMode") or options.get("fieldOrder") or "manual"
    if mode != "manual":
        raise TransformError(f"organize: field order {mode!r} is not supported by the "
                             "preview")
    include = {k for k, on in (options.get("includeByName") or {}).items() if on}
    exclude = {k for k, on in (options.get("excludeByName") or {}).items() if on}
    if include or exclude:
        kept = []
        for frame in frames:
            fields = [f for f in frame.fields
                      if not (exclude and _matches(exclude, f, frame, frames))
                      and (not include or _matches(include, f, frame, frames))]
            if fields:
                kept.append(_copy(frame, fields))
        frames = kept
    index = options.get("indexByName") or {}
    if index:
        def position(name: str) -> int:
            at = index.get(name)
            ok = isinstance(at, int) and not isinstance(at, bool)
            return at if ok else 2**53 - 1  # Number.MAX_SAFE_INTEGER

        frames = [_copy(frame, sorted(frame.fields, key=lambda f, fr=frame: position(
            panel_display_name(f, fr, frames)))) for frame in frames]
    renames = options.get("renameByName") or {}
    if renames:
        out = []
        for frame in frames:
            fields = []
            for f in frame.fields:
                to = renames.get(panel_display_name(f, frame, frames))
                if isinstance(to, str) and to:
                    f = Field(f.name, f.type, f.values, dict(f.labels),
                              {**f.config, "displayName": to})
                fields.append(f)
            out.append(_copy(frame, fields))
        frames = out
    return frames


# --------------------------------------------------------------------------- sortBy


def _sort_by(options: dict[str, Any], frames: list[Frame]) -> list[Frame]:
    entries = options.get("sort") or []
    if not frames or not entries:
        return frames
    first = entries[0]  # only the first entry counts, as in Grafana
    desc = bool(first.get("desc"))
    out = []
    for frame in frames:
        at = first.get("index")
        if not isinstance(at, int):
            at = next((i for i, f in enumerate(frame.fields)
                       if first.get("field") == panel_display_name(f, frame, frames)), -1)
        if not 0 <= at < len(frame.fields):
            out.append(frame)
            continue
        order = sorted(range(frame.length),
                       key=functools.cmp_to_key(_row_comparer(frame.fields[at], desc)))
        out.append(_copy(frame, [Field(f.name, f.type, [f.values[i] for i in order],
                                       dict(f.labels), dict(f.config))
                                 for f in frame.fields]))
    return out


def _row_comparer(fld: Field, desc: bool) -> Callable[[int, int], int]:
    """fieldIndexComparer: rows compared by the field's values, as its type says."""
    values = fld.values
    compare = _value_comparer(fld)
    if compare is None:
        # naturalIndexComparer: the rows keep their order (reversed for desc)
        return (lambda i, j: _sign(j - i)) if desc else (lambda i, j: _sign(i - j))
    if desc:
        return lambda i, j: compare(values[j], values[i])
    return lambda i, j: compare(values[i], values[j])


def _value_comparer(fld: Field) -> Callable[[Any, Any], int] | None:
    values = fld.values
    if fld.type is FieldType.NUMBER or (fld.type is FieldType.TIME and values
                                        and isinstance(values[0], int | float)):
        # JavaScript's a - b, in which null is 0
        return lambda a, b: _sign((a or 0) - (b or 0))
    if fld.type is FieldType.STRING:
        return _compare_strings
    if fld.type is FieldType.TIME:
        return lambda a, b: _falsy(a, b) if not a or not b else _sign((a > b) - (a < b))
    if values and all(isinstance(v, bool) or v is None for v in values):
        return _falsy  # booleanComparer: true before false and null
    return None


def _compare_strings(a: Any, b: Any) -> int:
    if not a or not b:
        return _falsy(a, b)
    ka, kb = _collation_key(str(a)), _collation_key(str(b))
    return (ka > kb) - (ka < kb)


def _sign(number: float) -> int:
    return (number > 0) - (number < 0)


def _falsy(a: Any, b: Any) -> int:
    if not a and b:
        return 1
    if a and not b:
        return -1
    return 0


def _collation_key(text: str) -> tuple[str, str]:
    """An approximation of ``localeCompare``: letters compared without case first, then
    lower case before upper case."""
    return text.casefold(), text.swapcase()


# --------------------------------------------------------------------------- limit


def _limit(options: dict[str, Any], frames: list[Frame]) -> list[Frame]:
    raw = options.get("limitField")
    try:
        limit = int(float(raw)) if raw not in (None, "") else 0
    except (TypeError, ValueError) as exc:
        raise TransformError(f"limit: limitField {raw!r} is not a number") from exc
    limit = limit or _DEFAULT_LIMIT
    out = []
    for frame in frames:
        if frame.length > limit:
            frame = _copy(frame, [Field(f.name, f.type, f.values[:limit], dict(f.labels),
                                        dict(f.config)) for f in frame.fields])
        out.append(frame)
    return out


# --------------------------------------------------------------------------- joinByField


def _join_by_field(options: dict[str, Any], frames: list[Frame]) -> list[Frame]:
    if len(frames) <= 1:
        return frames
    mode = options.get("mode") or "outer"
    if mode not in ("outer", "inner"):
        raise TransformError(f"joinByField: mode {mode!r} is not supported by the preview")
    by_field = options.get("byField")
    if by_field:
        def is_key(f: Field, frame: Frame) -> bool:
            return _matches({str(by_field)}, f, frame, frames)
    elif frames[0].time_field() is not None:
        def is_key(f: Field, frame: Frame) -> bool:
            return f is frame.time_field()
    else:
        # pickBestJoinField finds no common number field (it compares the first frame
        # with itself), so nothing joins
        return [Frame("", [])]
    tables: list[tuple[Field, list[Field]]] = []
    for frame in frames:
        key: Field | None = None
        rest: list[Field] = []
        for f in frame.fields:
            if key is None and is_key(f, frame):
                key = f
                continue
            name, labels = f.name, dict(f.labels)
            if frame.name:
                if f.name == VALUE_FIELD_NAME:
                    name = frame.name
                labels["_frameName"] = frame.name
            rest.append(Field(name, f.type, f.values, labels, dict(f.config)))
        if key is not None:
            tables.append((key, rest))
    if not tables:
        return [Frame("", [])]
    first_key = tables[0][0]
    keys, columns = (_inner if mode == "inner" else _outer)(tables)
    fields = [Field(first_key.name, first_key.type, keys, dict(first_key.labels),
                    dict(first_key.config))]
    others = [f for _, rest in tables for f in rest]
    fields += [Field(f.name, f.type, col, f.labels, f.config)
               for f, col in zip(others, columns, strict=True)]
    return [Frame("", fields)]


def _outer(tables: list[tuple[Field, list[Field]]]) -> tuple[list[Any], list[list[Any]]]:
    """uPlot's join: every key once, numbers ascending (other keys in the order first
    seen: JavaScript's ``a - b`` of strings is NaN, which the sort takes as equal)."""
    keys = list(dict.fromkeys(v for key, _ in tables for v in key.values))
    if all(isinstance(k, int | float) and not isinstance(k, bool) or k is None
           for k in keys):
        keys.sort(key=lambda k: k or 0)
    at = {k: i for i, k in enumerate(keys)}
    columns: list[list[Any]] = []
    for key, rest in tables:
        for f in rest:
            column: list[Any] = [None] * len(keys)
            for k, v in zip(key.values, f.values, strict=True):
                column[at[k]] = v
            columns.append(column)
    return keys, columns


def _inner(tables: list[tuple[Field, list[Field]]]) -> tuple[list[Any], list[list[Any]]]:
    """joinInner: a row per combination whose keys the row built so far contains."""
    rows: list[list[Any]] = []

    def extend(index: int, row: list[Any]) -> None:
        if index == len(tables):
            rows.append(row)
            return
        key, rest = tables[index]
        for i, value in enumerate(key.values):
            # Grafana looks the key up in the whole row (row.includes(value))
            if index == 0 or value in row:
                extend(index + 1, row + ([value] if index == 0 else [])
                       + [f.values[i] for f in rest])

    extend(0, [])
    width = 1 + sum(len(rest) for _, rest in tables)
    columns = [[row[c] for row in rows] for c in range(width)]
    return columns[0], columns[1:]


# --------------------------------------------------------------------------- transpose


def _transpose(options: dict[str, Any], frames: list[Frame]) -> list[Frame]:
    if not frames:
        return frames
    empty = _special(options.get("emptyValue"))
    first_name = options.get("firstFieldName") or "Field"
    rest_name = options.get("restFieldsName") or VALUE_FIELD_NAME
    out: list[Frame] = []
    for frame in frames:
        if not frame.fields:
            out.append(frame)
            continue
        head = frame.fields[0]
        headed = head.type in (FieldType.STRING, FieldType.TIME)
        shown = [panel_display_name(f, frame, frames) for f in frame.fields]
        rows = shown[1:] if headed else shown
        kinds = {f.type for f in (frame.fields[1:] if headed else frame.fields)}
        kind = next(iter(kinds)) if len(kinds) == 1 else FieldType.STRING
        fields = [Field(first_name, FieldType.STRING, rows)]
        for i in range(frame.length):
            values = [_as_text(f, f.values[i], empty) if kind is FieldType.STRING
                      else f.values[i] for f in frame.fields]
            if headed:
                label = {head.name: str(_as_text(head, head.values[i], empty))}
                fields.append(Field(rest_name, kind, values[1:], label))
            else:
                fields.append(Field(rest_name, kind, values, {"row": str(i + 1)}))
        out.append(Frame(f"transpose-{frame.ref_id}", fields, frame.name, dict(frame.meta)))
    for transposed in out:
        if transposed.ref_id.startswith("transpose-"):
            for f in transposed.fields[1:]:
                f.config["displayNameFromDS"] = panel_display_name(f, transposed, out)
    return out


def _special(value: Any) -> Any:
    """getSpecialValue of the ``emptyValue`` option (default: empty text)."""
    return {"true": True, "false": False, "null": None}.get(str(value), "")


def _as_text(fld: Field, value: Any, empty: Any) -> Any:
    """fieldValuesAsStrings: a value as the transposed text column shows it."""
    if value is None:
        return empty
    if isinstance(value, bool):
        return "true" if value else "false"
    if fld.type in (FieldType.NUMBER, FieldType.TIME) and isinstance(value, int | float):
        return number_text(value)
    if fld.type is FieldType.STRING:
        return str(value)
    return _json_stringify(value)


def _json_stringify(value: Any) -> str:
    """JavaScript's JSON.stringify of a parsed JSON value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return number_text(value) if math.isfinite(value) else "null"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{json.dumps(str(k), ensure_ascii=False)}:"
                              f"{_json_stringify(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_json_stringify(v) for v in value) + "]"
    return json.dumps(str(value), ensure_ascii=False)


_STEPS: dict[str, Callable[[dict[str, Any], list[Frame]], list[Frame]]] = {
    "organize": _organize,
    "sortBy": _sort_by,
    "limit": _limit,
    "joinByField": _join_by_field,
    "seriesToColumns": _join_by_field,  # joinByField's old id (aliasIds)
    "transpose": _transpose,
}
