"""Values of Avro schemas for the property tests of the compiled writer and reader, and a
schema with the types none of the project's schemas uses yet."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastavro.schema import parse_schema
from hypothesis import strategies as st

#: the types none of the project's schemas uses yet, and a union with null second
OTHER_TYPES = parse_schema({
    "type": "record", "name": "Other", "namespace": "test",
    "fields": [
        {"name": "i", "type": "int"},
        {"name": "f", "type": "float"},
        {"name": "b", "type": "bytes"},
        {"name": "m", "type": {"type": "map", "values": ["null", "long"]}},
        {"name": "late_null", "type": ["string", "null"], "default": "x"},
        {"name": "flag", "type": "boolean", "default": True},
        {"name": "nested", "type": {"type": "array", "items": {
            "type": "record", "name": "Point", "fields": [
                {"name": "x", "type": "double"}, {"name": "tags", "type": {
                    "type": "array", "items": "string"}}]}}},
        {"name": "again", "type": ["null", "Point"], "default": None},
        {"name": "empty", "type": {"type": "record", "name": "Empty", "fields": []}},
    ],
})


def avro_values(schema: Any, named: Mapping[str, Any]) -> st.SearchStrategy[Any]:
    """Values of ``schema`` (parsed), as the worker's documents hold them."""
    if isinstance(schema, list):
        return st.one_of(*(avro_values(s, named) for s in schema))
    if isinstance(schema, str):
        simple: dict[str, st.SearchStrategy[Any]] = {
            "null": st.none(), "boolean": st.booleans(),
            "int": st.integers(-(1 << 31), (1 << 31) - 1),
            "long": st.integers(-(1 << 63), (1 << 63) - 1),
            "float": st.floats(width=32, allow_nan=False),
            "double": st.floats(allow_nan=False) | st.integers(-(1 << 53), 1 << 53),
            "string": st.text(max_size=20), "bytes": st.binary(max_size=20)}
        if schema in simple:
            return simple[schema]
        return st.deferred(lambda: avro_values(named[schema], named))
    kind = schema["type"]
    if kind == "array":
        return st.lists(avro_values(schema["items"], named), max_size=3)
    if kind == "map":
        return st.dictionaries(st.text(max_size=8), avro_values(schema["values"], named),
                               max_size=3)
    if kind == "record":
        required = {f["name"]: avro_values(f["type"], named) for f in schema["fields"]
                    if "default" not in f}
        optional = {f["name"]: avro_values(f["type"], named) for f in schema["fields"]
                    if "default" in f}
        return st.fixed_dictionaries(required, optional=optional)
    return avro_values(kind, named)
