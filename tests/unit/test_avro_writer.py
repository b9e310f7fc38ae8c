"""The compiled Avro writer writes fastavro's bytes, for every schema of the project and
for the types no schema uses yet; wrong values raise; other schemas fall back."""

from __future__ import annotations

import io
import math
from collections.abc import Mapping
from typing import Any

import pytest
from avro_values import OTHER_TYPES, avro_values
from fastavro import schemaless_reader, schemaless_writer
from fastavro.schema import parse_schema
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.codecs.avro_writer import Unsupported, compile_writer
from pipeline.codecs.codec import AvroCodec
from pipeline.codecs.schemas import SCHEMA_NAMES, SchemaVersions, load_schema
from pipeline.runtime.errors import ParseError


def _fastavro(schema: Mapping[str, Any], datum: Mapping[str, Any]) -> bytes:
    buf = io.BytesIO()
    schemaless_writer(buf, schema, datum)
    return buf.getvalue()


def _compiled(schema: Mapping[str, Any], datum: Mapping[str, Any]) -> bytes:
    out = bytearray()
    compile_writer(schema)(datum, out)
    return bytes(out)


SCHEMAS = {name: load_schema(name).current for name in SCHEMA_NAMES} | {"Other": OTHER_TYPES}


@pytest.mark.parametrize("name", sorted(SCHEMAS))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_compiled_writer_writes_fastavros_bytes(name: str, data: st.DataObject) -> None:
    schema = SCHEMAS[name]
    datum = data.draw(avro_values(schema, schema["__named_schemas"]))
    written = _compiled(schema, datum)
    assert written == _fastavro(schema, datum)
    back = schemaless_reader(io.BytesIO(written), schema, None)
    assert isinstance(back, dict)


def test_the_codec_uses_the_compiled_writer_for_every_schema() -> None:
    for name in SCHEMA_NAMES:
        assert AvroCodec(name)._write is not None, name


@pytest.mark.parametrize(("field", "value"), [
    ("revision", "7"),  # long
    ("revision", 1.5),
    ("revision", 1 << 64),
    ("wait_s", "1.0"),  # ["null", "double"]
    ("cluster", 42),  # string
    ("cancelled_before_start", 1),  # ["null", "boolean"]
    ("nodelist", "node1"),  # ["null", array]: a string is not a list of names
    ("run_interval", [1, 2]),  # ["null", TimeRange]
])
def test_a_value_of_the_wrong_type_is_an_invalid_record(field: str, value: Any) -> None:
    codec = AvroCodec("JobState")
    doc = {"cluster": "c", "scheduler": "flux", "job_id": "1", "incarnation": 0,
           "revision": 1, "updated_at": 0, field: value}
    with pytest.raises(ParseError) as err:
        codec.encode(doc)
    assert err.value.reason == "invalid-record"


def test_a_missing_field_takes_its_default_and_a_required_one_fails() -> None:
    codec = AvroCodec("JobState")
    doc = {"cluster": "c", "scheduler": "flux", "job_id": "1", "incarnation": 0,
           "revision": 1, "updated_at": 0}
    assert codec.decode(codec.encode(doc))["requeue_count"] == 0
    del doc["revision"]
    with pytest.raises(ParseError):
        codec.encode(doc)


def test_a_schema_it_does_not_cover_is_left_to_fastavro() -> None:
    wide = {"type": "record", "name": "Wide", "fields": [
        {"name": "u", "type": ["null", "long", "string"]},
        {"name": "t", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}
    with pytest.raises(Unsupported):
        compile_writer(parse_schema(wide))
    parsed = parse_schema(wide)
    versions = SchemaVersions(name="Wide", current=parsed, text="{}", history={1: parsed})
    codec = AvroCodec("Wide", versions=versions)
    assert codec._write is None
    value = {"u": "x", "t": 1700000000000}
    assert codec.decode(codec.encode(value))["u"] == "x"


def test_floats_and_doubles_keep_their_bits() -> None:
    schema = parse_schema({"type": "record", "name": "F", "fields": [
        {"name": "d", "type": "double"}, {"name": "f", "type": "float"}]})
    for v in (math.nan, math.inf, -0.0, 1e308, 5e-324):
        assert _compiled(schema, {"d": v, "f": v}) == _fastavro(schema, {"d": v, "f": v})
