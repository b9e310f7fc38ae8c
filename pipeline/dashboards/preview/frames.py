"""Data frames: what a panel draws, in the shape Grafana's data sources hand to panels.

A :class:`Frame` is a list of equally long :class:`Field` columns, as in Grafana's data
plane. A time series is a frame of a ``time`` field and one ``number`` field whose
``labels`` name the series (a terms bucket's key, ``{"queue": "pbatch"}``); a table is a
frame of any fields. Frames are made from Elasticsearch answers by
:mod:`~pipeline.dashboards.preview.es_frames`, combined by
:mod:`~pipeline.dashboards.preview.expressions` and
:mod:`~pipeline.dashboards.preview.transforms`, and drawn by
:mod:`~pipeline.dashboards.preview.draw`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum
from typing import Any

__all__ = ["TIME_FIELD_NAME", "VALUE_FIELD_NAME", "Field", "FieldType", "Frame",
           "format_labels", "number_text", "panel_display_name"]


class FieldType(StrEnum):
    TIME = "time"        # epoch milliseconds (int)
    NUMBER = "number"    # float, or None where a bucket has no value
    STRING = "string"
    OTHER = "other"      # booleans, objects, lists: shown as text


@dataclass
class Field:
    name: str
    type: FieldType
    values: list[Any]
    #: the series' labels (terms keys above a date histogram), as Grafana's data frames
    labels: dict[str, str] = field(default_factory=dict)
    #: Grafana's field config as the data source sets it: ``displayNameFromDS`` (an
    #: alias, or the name Grafana's Elasticsearch data source gives the series)
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def display_name(self) -> str:
        """The name a panel shows: the field's display name, else ``name {labels}``."""
        shown = self.config.get("displayName") or self.config.get("displayNameFromDS")
        if shown:
            return str(shown)
        if not self.labels:
            return self.name
        inner = ", ".join(f"{k}={v}" for k, v in self.labels.items())
        return f"{self.name} {{{inner}}}"


@dataclass
class Frame:
    ref_id: str
    fields: list[Field]
    name: str = ""
    #: Grafana's frame meta as the data source sets it (``type``,
    #: ``preferredVisualisationType``, ``custom``)
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        lengths = {len(f.values) for f in self.fields}
        if len(lengths) > 1:
            raise ValueError(f"frame {self.ref_id!r}: fields of unequal length {lengths}")

    @property
    def length(self) -> int:
        return len(self.fields[0].values) if self.fields else 0

    def field(self, name: str) -> Field | None:
        """The first field called ``name`` (or displayed so), if any."""
        for f in self.fields:
            if f.name == name or f.display_name == name:
                return f
        return None

    def time_field(self) -> Field | None:
        return next((f for f in self.fields if f.type is FieldType.TIME), None)

    def number_fields(self) -> list[Field]:
        return [f for f in self.fields if f.type is FieldType.NUMBER]

    def is_time_series(self) -> bool:
        return self.time_field() is not None and bool(self.number_fields())

    def rows(self) -> list[list[Any]]:
        return [[f.values[i] for f in self.fields] for i in range(self.length)]


# --------------------------------------------------------------------------- helpers

#: the names Grafana gives the two fields of a time series (data.TimeSeries*FieldName)
TIME_FIELD_NAME = "Time"
VALUE_FIELD_NAME = "Value"

_EXPONENT = re.compile(r"e([+-])0*(\d)")


def number_text(value: float) -> str:
    """A number as Grafana writes it: JavaScript's ``String(x)``, which Go's
    ``encoding/json`` follows too (``5``, ``2.5``, ``1e+21``, ``1.5e-7``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if abs(value) < 10**21:
            return str(value)
        value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "0"
    if 1e-6 <= abs(value) < 1e21:
        # shortest round-trip digits, written without an exponent
        text = format(Decimal(repr(value)), "f")
        return text.rstrip("0").rstrip(".") if "." in text else text
    return _EXPONENT.sub(r"e\1\2", repr(value).replace(".0e", "e"))


def format_labels(labels: Mapping[str, str]) -> str:
    """Labels as Grafana's frontend prints them: ``{a="x", b="y"}``, keys sorted."""
    if not labels:
        return ""
    return "{" + ", ".join(f'{k}="{labels[k]}"' for k in sorted(labels)) + "}"


def panel_display_name(fld: Field, frame: Frame, frames: Sequence[Frame] | None = None
                       ) -> str:
    """The name a Grafana panel gives ``fld`` of ``frame`` among ``frames``, as the
    frontend's ``calculateFieldDisplayName`` (packages/grafana-data/src/field/
    fieldState.ts) does: the configured names first, else the frame name where the
    frames' names differ, the field name unless it is ``Value``, and the one label's
    value when every labelled field has the same single label key (all labels
    otherwise), made unique within the frame (``Count 1``, ``Count 2``)."""
    for key in ("displayName", "displayNameFromDS"):
        if fld.config.get(key):
            return str(fld.config[key])
    if fld.type is FieldType.TIME and not fld.labels:
        return fld.name or TIME_FIELD_NAME
    others = list(frames) if frames else [frame]
    names_differ = any(others[i].name != others[i - 1].name for i in range(1, len(others)))
    parts: list[str] = []
    frame_named = labelled = False
    if names_differ and frame.name:
        parts.append(frame.name)
        frame_named = True
    if fld.name and fld.name != VALUE_FIELD_NAME:
        parts.append(fld.name)
    if fld.labels:
        single = _single_label_name(others)
        if single is None:
            parts.append(format_labels(fld.labels))
            labelled = True
        elif fld.labels.get(single):
            parts.append(fld.labels[single])
            labelled = True
    if not frame_named and not labelled and fld.name == VALUE_FIELD_NAME and frame.name:
        parts.append(frame.name)
    shown = " ".join(parts) if parts else (fld.name or VALUE_FIELD_NAME)
    if shown == fld.name:
        shown = _unique_name(fld, frame)
    return shown


def _single_label_name(frames: Sequence[Frame]) -> str | None:
    single: str | None = None
    for frame in frames:
        for fld in frame.fields:
            for key in fld.labels:
                if single is None:
                    single = key
                elif key != single:
                    return None
    return single


def _unique_name(fld: Field, frame: Frame) -> str:
    # fieldState.ts getUniqueFieldName: the n-th of equally named fields is "name n"
    dupes = 0
    seen_self = False
    for other in frame.fields:
        if other is fld:
            seen_self = True
            if dupes:
                dupes += 1
                break
        elif other.name == fld.name:
            dupes += 1
            if seen_self:
                break
    return f"{fld.name} {dupes}" if dupes else fld.name
