"""What a panel's field config and options say about each field it shows: its config after
the panel's defaults and overrides, its name, its colour, the colour of a value by the
thresholds, and the values a stat or bar gauge shows (the fields reduced).

Grafana's semantics followed, from grafana/grafana's ``packages/grafana-data``:

* the panel's ``fieldConfig.defaults`` fill what the data source left unset, then
  ``overrides`` apply by matcher (``field/fieldOverrides.ts``, ``transformations/
  matchers``) on the field's display name
  (:func:`~pipeline.dashboards.preview.frames.panel_display_name`); a configured
  ``displayName`` with ``${__field.labels.x}`` interpolated;
* colours from the light theme's ``themes/createVisualizationColors.ts``; thresholds as
  ``field/thresholds.ts`` and ``field/scale.ts`` (percentage mode against the field's
  min/max, the global data range when unset; Grafana's default steps green, red at 80);
* reductions (``reduceOptions.calcs``) as ``transformations/fieldReducer.ts``, nulls
  ignored; ``getFieldDisplayValues`` of ``field/fieldDisplay.ts`` for the values.

What the preview cannot honour raises :class:`CannotDraw`, which the panel is drawn as a
placeholder naming.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from matplotlib import colors as mcolors

from pipeline.dashboards.preview.frames import (
    Field,
    FieldType,
    Frame,
    format_labels,
    panel_display_name,
)
from pipeline.dashboards.preview.units import format_value, is_date_unit

__all__ = ["CannotDraw", "DisplayValue", "NoValues", "ShownField", "as_number", "calc_name",
           "color_of", "display_values", "field_range", "first_of_type", "reduce_values",
           "resolve_fields", "series_color", "thresholds", "value_color"]

_FALLBACK_COLOR = "#808080"
#: the light theme's named colours (createVisualizationColors.ts, getLightHues)
_HUES = {
    "red": ("#FF7383", "#F2495C", "#E02F44", "#C4162A", "#AD0317"),
    "orange": ("#FFB357", "#FF9830", "#FF780A", "#FA6400", "#E55400"),
    "yellow": ("#FFEE52", "#FADE2A", "#F2CC0C", "#E0B400", "#CC9D00"),
    "green": ("#96D98D", "#73BF69", "#56A64B", "#37872D", "#19730E"),
    "blue": ("#8AB8FF", "#5794F2", "#3274D9", "#1F60C4", "#1250B0"),
    "purple": ("#CA95E5", "#B877D9", "#A352CC", "#8F3BB8", "#7C2EA3"),
}
_SHADES = ("super-light-{}", "light-{}", "{}", "semi-dark-{}", "dark-{}")
_NAMED = {shade.format(hue): c for hue, cs in _HUES.items() for shade, c in zip(_SHADES, cs,
                                                                                 strict=True)}
#: Grafana's classic palette, the series colours of palette-classic (getClassicPalette)
_CLASSIC = (
    "green", "yellow", "blue", "orange", "red", "purple", "dark-green", "dark-yellow",
    "dark-blue", "dark-orange", "dark-red", "dark-purple", "super-light-green",
    "super-light-yellow", "super-light-blue", "super-light-orange", "super-light-red",
    "super-light-purple", "#447EBC", "#C15C17", "#890F02", "#0A437C", "#6D1F62", "#584477",
    "#B7DBAB", "#F4D598", "#70DBED", "#F9BA8F", "#F29191", "#82B5D8", "#E5A8E2", "#AEA2E0",
)
#: the thresholds option's default (standardFieldConfigEditorRegistry)
_DEFAULT_THRESHOLDS = {"mode": "absolute", "steps": [{"color": "green", "value": None},
                                                      {"color": "red", "value": 80}]}


class CannotDraw(Exception):
    """The panel cannot be drawn faithfully: the message says what is missing."""


class NoValues(Exception):
    """There are rows, but nothing the panel shows (Grafana says "No data"): why."""


# ---------------------------------------------------------------------------------------
# Field config: defaults, overrides, display names
# ---------------------------------------------------------------------------------------

@dataclass
class ShownField:
    """A field as the panel shows it: its config after defaults and overrides, its name."""

    frame: Frame
    field: Field
    config: dict[str, Any]
    name: str
    #: the series' index among the panel's number fields (the palette's colour)
    index: int

    @property
    def custom(self) -> dict[str, Any]:
        return self.config.get("custom") or {}

    @property
    def unit(self) -> str | None:
        unit = self.config.get("unit")
        return str(unit) if unit else None

    @property
    def decimals(self) -> int | None:
        d = self.config.get("decimals")
        return int(d) if isinstance(d, int | float) else None

    def text(self, value: Any, now_ms: int) -> str:
        """``value`` as this field shows it (display processor)."""
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return str(self.config.get("noValue") or "")
        if self.field.type is FieldType.TIME and isinstance(value, int | float):
            unit = self.unit if is_date_unit(self.unit) else "dateTimeAsSystem"
            return format_value(value, unit, now_ms=now_ms)
        if isinstance(value, Mapping | list):
            return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        return format_value(value, self.unit, self.decimals, now_ms=now_ms)

    def hidden(self) -> bool:
        return bool((self.custom.get("hideFrom") or {}).get("viz")) or \
            bool(self.custom.get("hidden"))


def first_of_type(fields: Sequence[ShownField], kind: FieldType) -> ShownField | None:
    """The first of ``fields`` of type ``kind``, if any."""
    return next((s for s in fields if s.field.type is kind), None)


def as_number(value: Any) -> float | None:
    """``value`` as a float when it is a number (booleans are not)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def resolve_fields(panel: Mapping[str, Any], frames: Sequence[Frame]) -> list[list[ShownField]]:
    """Every field of every frame with the panel's field config applied."""
    fc = panel.get("fieldConfig") or {}
    defaults = fc.get("defaults") or {}
    overrides = fc.get("overrides") or []
    if defaults.get("mappings"):
        raise CannotDraw("value mappings (fieldConfig.defaults.mappings) are not applied "
                         "by the preview")
    out: list[list[ShownField]] = []
    index = 0
    for frame in frames:
        row: list[ShownField] = []
        for f in frame.fields:
            # overrides match the name the data source and the transformations gave
            before = panel_display_name(f, frame, frames)
            config = _with_defaults(f.config, defaults)
            for override in overrides:
                if _matches(override.get("matcher") or {}, f, frame, before):
                    for prop in override.get("properties") or []:
                        _set_property(config, prop)
            name = before
            if config.get("displayName"):
                name = _interpolate(str(config["displayName"]), f, frame, before)
            row.append(ShownField(frame, f, config, name, index))
            if f.type is FieldType.NUMBER:
                index += 1
        out.append(row)
    return out


def _with_defaults(own: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """What the data source left unset, from the panel's defaults (custom key by key)."""
    out = copy.deepcopy(dict(own))
    for key, value in defaults.items():
        if key == "custom" and isinstance(value, Mapping):
            custom = dict(out.get("custom") or {})
            for ck, cv in value.items():
                custom.setdefault(ck, copy.deepcopy(cv))
            out["custom"] = custom
        elif out.get(key) is None:
            out[key] = copy.deepcopy(value)
    return out


def _set_property(config: dict[str, Any], prop: Mapping[str, Any]) -> None:
    pid = str(prop.get("id") or "")
    if pid == "mappings" and prop.get("value"):
        raise CannotDraw("value mappings (an override's mappings) are not applied by the "
                         "preview")
    if pid == "custom.transform" and prop.get("value") not in (None, "constant"):
        raise CannotDraw(f"series transform {prop.get('value')!r} (override "
                         "custom.transform) is not applied by the preview")
    target = config
    *path, last = pid.split(".")
    for key in path:
        target = target.setdefault(key, {})
    target[last] = copy.deepcopy(prop.get("value"))


def _matches(matcher: Mapping[str, Any], f: Field, frame: Frame, name: str) -> bool:
    """Grafana's field matchers (transformations/matchers) on the name before overrides."""
    mid, opt = matcher.get("id"), matcher.get("options")
    if mid == "byName":
        return opt == name
    if mid == "byNames":
        names = (opt or {}).get("names") or [] if isinstance(opt, Mapping) else []
        mode = (opt or {}).get("mode", "include") if isinstance(opt, Mapping) else "include"
        return (name in names) == (mode != "exclude")
    if mid == "byRegexp":
        return _js_regex(str(opt or "")).search(name) is not None
    if mid == "byFrameRefID":
        return frame.ref_id == opt
    if mid == "byType":
        kind = "boolean" if f.type is FieldType.OTHER and all(
            isinstance(v, bool) or v is None for v in f.values) else f.type.value
        return kind == opt
    raise CannotDraw(f"override matcher {mid!r} is not applied by the preview")


def _js_regex(pattern: str) -> re.Pattern[str]:
    """stringToJsRegex: ``/body/flags``, else the whole text anchored."""
    m = re.fullmatch(r"/(.*)/([gimsuy]*)", pattern, re.DOTALL)
    if m is None:
        return re.compile(f"^{pattern}$")
    flags = (re.IGNORECASE if "i" in m.group(2) else 0) | (re.S if "s" in m.group(2) else 0)
    return re.compile(m.group(1), flags)


_TEMPLATE = re.compile(r"\$\{(__field|__series)\.([A-Za-z]+)(?:\.([^}]+))?\}")


def _interpolate(text: str, f: Field, frame: Frame, name: str) -> str:
    """``${__field.labels.x}``, ``${__field.name}``, ``${__series.name}`` as Grafana's
    template service replaces them; an unknown label stays as written (Grafana leaves a
    variable it cannot resolve), dashboard variables too."""
    def replace(m: re.Match[str]) -> str:
        scope, key, sub = m.group(1), m.group(2), m.group(3)
        if scope == "__series" and key == "name" and sub is None:
            return frame.name or name
        if scope == "__field" and key == "name" and sub is None:
            return f.name
        if scope == "__field" and key == "displayName" and sub is None:
            return name
        if scope == "__field" and key == "labels":
            if sub is None:   # all of them, without the braces
                return format_labels(f.labels)[1:-1]
            if sub in f.labels:
                return f.labels[sub]
        return m.group(0)
    return _TEMPLATE.sub(replace, text)


# ---------------------------------------------------------------------------------------
# Colours and thresholds
# ---------------------------------------------------------------------------------------

def color_of(name: str | None) -> str:
    """A Grafana colour name (``green``, ``dark-red``, ``#hex``, ``rgb(...)``, CSS names)
    as the light theme's hex, lower case (getColorByName)."""
    if not name:
        return _FALLBACK_COLOR
    if name in _NAMED:
        return _NAMED[name].lower()
    m = re.fullmatch(r"rgba?\(([^)]*)\)", name.strip())
    if m:
        parts = [float(p) for p in m.group(1).split(",")[:3]]
        return mcolors.to_hex([min(max(p / 255, 0), 1) for p in parts])
    try:
        return mcolors.to_hex(name.lower() if not name.startswith("#") else name)
    except ValueError:
        return _FALLBACK_COLOR


def series_color(s: ShownField) -> str:
    """The field's colour as a series: its fixed colour, else the classic palette's."""
    color = s.config.get("color") or {}
    if color.get("mode") == "fixed" and color.get("fixedColor"):
        return color_of(str(color["fixedColor"]))
    return color_of(_CLASSIC[s.index % len(_CLASSIC)])


def thresholds(config: Mapping[str, Any]) -> tuple[str, list[tuple[float, str]]]:
    """(mode, [(from value, colour)]) sorted; the first step from minus infinity."""
    th = config.get("thresholds") or _DEFAULT_THRESHOLDS
    steps = []
    for step in th.get("steps") or []:
        v = step.get("value")
        steps.append((-math.inf if v is None else float(v), color_of(step.get("color"))))
    steps.sort(key=lambda s: s[0])
    return str(th.get("mode") or "absolute"), steps or [(-math.inf, _FALLBACK_COLOR)]


def _threshold_color(value: float | None, config: Mapping[str, Any], vmin: float,
                     vmax: float) -> str:
    """getActiveThreshold: the last step at or below the value (its percentage of
    [vmin, vmax] in percentage mode)."""
    mode, steps = thresholds(config)
    if value is None or math.isnan(value):
        return steps[0][1]
    probe = value
    if mode == "percentage":
        probe = (value - vmin) / (vmax - vmin) * 100 if vmax != vmin else 0.0
    active = steps[0][1]
    for start, color in steps:
        if probe >= start:
            active = color
        else:
            break
    return active


def value_color(s: ShownField, value: float | None, vmin: float, vmax: float) -> str:
    """The colour of a value in a stat or bar gauge (colour mode thresholds by default)."""
    color = s.config.get("color") or {}
    mode = color.get("mode") or "thresholds"
    if mode == "fixed" and color.get("fixedColor"):
        return color_of(str(color["fixedColor"]))
    if mode == "thresholds":
        return _threshold_color(value, s.config, vmin, vmax)
    return series_color(s)


def field_range(shown: Sequence[ShownField], s: ShownField) -> tuple[float, float]:
    """The field's min/max: its config, the unit's implied range (percent 0-100,
    percentunit 0-1), else every number field's values (findNumericFieldMinMax)."""
    implied = {"percent": (0.0, 100.0), "percentunit": (0.0, 1.0)}.get(s.unit or "", (None, None))
    lo = s.config.get("min", implied[0])
    hi = s.config.get("max", implied[1])
    if lo is None or hi is None:
        values = [float(v) for x in shown if x.field.type is FieldType.NUMBER
                  for v in x.field.values if isinstance(v, int | float) and not math.isnan(v)]
        lo = min(values, default=0.0) if lo is None else lo
        hi = max(values, default=100.0) if hi is None else hi
    return float(lo), float(hi)


# ---------------------------------------------------------------------------------------
# Reductions and the values a stat or bar gauge shows
# ---------------------------------------------------------------------------------------

def reduce_values(values: Sequence[Any], calc: str) -> Any:
    """``values`` reduced by ``calc`` (fieldReducer.ts; nulls ignored, as nullValueMode's
    default)."""
    present = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    nums = [n for n in map(as_number, present) if n is not None]
    match calc:
        case "lastNotNull":
            return present[-1] if present else None
        case "last":
            return values[-1] if values else None
        case "firstNotNull":
            return present[0] if present else None
        case "first":
            return values[0] if values else None
        case "max":
            return max(nums) if nums else None
        case "min":
            return min(nums) if nums else None
        case "mean":
            return sum(nums) / len(nums) if nums else None
        case "sum":
            return sum(nums)
        case "count":
            return len(present)
        case "range":
            return max(nums) - min(nums) if nums else None
        case "diff":
            return nums[-1] - nums[0] if nums else None
    raise CannotDraw(f"reducer {calc!r} (reduceOptions.calcs) is not computed by the preview")


_CALC_NAMES = {"lastNotNull": "Last *", "last": "Last", "firstNotNull": "First *",
               "first": "First", "max": "Max", "min": "Min", "mean": "Mean", "sum": "Total",
               "count": "Count", "range": "Range", "diff": "Difference"}


def calc_name(calc: str) -> str:
    """The name Grafana gives a reducer (``Last *``); an unknown one's id."""
    return _CALC_NAMES.get(calc, calc)


@dataclass
class DisplayValue:
    """One value a stat or bar gauge shows."""

    name: str
    value: Any
    shown: ShownField
    #: (t_ms, value) pairs of the field, for a stat's sparkline
    spark: list[tuple[float, float]] = field(default_factory=list)


def display_values(panel: Mapping[str, Any], shown: Sequence[Sequence[ShownField]]
                   ) -> list[DisplayValue]:
    """getFieldDisplayValues of fieldDisplay.ts: each matching field reduced by each calc,
    or (``values: true``) each of its rows. Raises :class:`NoValues` when no field
    matches."""
    opts = (panel.get("options") or {}).get("reduceOptions") or {}
    calcs = list(opts.get("calcs") or ["last"])
    pattern = str(opts.get("fields") or "")
    regex = _js_regex(pattern) if pattern else None
    limit = int(opts.get("limit") or 25)
    out: list[DisplayValue] = []
    for frame_fields in shown:
        time_field = first_of_type(frame_fields, FieldType.TIME)
        for s in frame_fields:
            if regex is None and s.field.type is not FieldType.NUMBER:
                continue
            if regex is not None and regex.search(s.name) is None:
                continue
            if s.hidden():
                continue
            if opts.get("values"):
                for row in range(len(s.field.values)):
                    out.append(DisplayValue(_row_name(frame_fields, s, row),
                                            s.field.values[row], s))
                    if len(out) >= limit:
                        return out
                continue
            spark = []
            if time_field is not None:
                spark = [(float(t), float(v)) for t, v in zip(time_field.field.values,
                                                              s.field.values, strict=True)
                         if isinstance(t, int | float) and isinstance(v, int | float)]
            for calc in calcs:
                name = s.name if len(calcs) == 1 else f"{calc_name(calc)} {s.name}"
                out.append(DisplayValue(name, reduce_values(s.field.values, calc), s, spark))
    if not out:
        raise NoValues(f"no field of the data matches reduceOptions.fields {opts['fields']!r}"
                       if opts.get("fields") else "the data has no number field to show")
    return out


def _row_name(frame_fields: Sequence[ShownField], s: ShownField, row: int) -> str:
    """getSmartDisplayNameForRow: the row's string values, and the field's name when other
    number fields share the row."""
    if s.field.config.get("displayName") or s.config.get("displayName"):
        return s.name
    parts: list[str] = []
    others = 0
    for o in frame_fields:
        if o is s:
            continue
        if o.field.type is FieldType.STRING:
            v = o.field.values[row]
            if v:
                parts.append(str(v))
        elif o.field.type is FieldType.NUMBER:
            others += 1
    if others or not parts:
        parts.append(s.name)
    return " ".join(parts)


