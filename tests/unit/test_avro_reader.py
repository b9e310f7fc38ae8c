"""The compiled Avro reader reads what fastavro reads, for every schema of the project and
for the types no schema uses yet; a malformed body is bad-avro, never another error;
other schemas and older versions are left to fastavro."""

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

from pipeline.codecs.avro_reader import compile_reader, read_long
from pipeline.codecs.avro_writer import Unsupported, write_long
from pipeline.codecs.codec import AvroCodec
from pipeline.codecs.schemas import SCHEMA_NAMES, fingerprint, load_schema
from pipeline.runtime.errors import ParseError

SCHEMAS = {name: load_schema(name).current for name in SCHEMA_NAMES} | {"Other": OTHER_TYPES}


def _fastavro(schema: Mapping[str, Any], datum: Mapping[str, Any]) -> bytes:
    buf = io.BytesIO()
    schemaless_writer(buf, schema, datum)
    return buf.getvalue()


def _same(a: Any, b: Any) -> bool:
    """Equal, NaN included."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("name", sorted(SCHEMAS))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), prefix=st.binary(max_size=3))
def test_the_compiled_reader_reads_what_fastavro_reads(name: str, data: st.DataObject,
                                                       prefix: bytes) -> None:
    schema = SCHEMAS[name]
    body = _fastavro(schema, data.draw(avro_values(schema, schema["__named_schemas"])))
    got, end = compile_reader(schema)(prefix + body, len(prefix))
    assert end == len(prefix) + len(body)
    assert _same(got, schemaless_reader(io.BytesIO(body), schema, None))


@pytest.mark.parametrize("name", SCHEMA_NAMES)
@settings(max_examples=200, deadline=None)
@given(data=st.data(), cut=st.integers(min_value=1, max_value=64), junk=st.binary(max_size=40))
def test_a_malformed_body_is_bad_avro(name: str, data: st.DataObject, cut: int,
                                      junk: bytes) -> None:
    codec = AvroCodec(name)
    schema = SCHEMAS[name]
    whole = codec.encode(data.draw(avro_values(schema, schema["__named_schemas"])))
    header = 10  # C3 01 and the fingerprint
    for value in (whole[:max(len(whole) - cut, header)], whole + (junk[:1] or b"\0")):
        with pytest.raises(ParseError) as err:
            codec.decode(value)
        assert err.value.reason == "bad-avro"
    try:
        assert isinstance(codec.decode(whole[:header] + junk), dict)
    except ParseError as err:
        assert err.reason == "bad-avro"


def test_the_codec_reads_the_current_schema_compiled_and_older_versions_by_fastavro() -> None:
    versions = load_schema("JobState")
    codec = AvroCodec("JobState")
    assert codec._read_current is not None  # noqa: SLF001
    older = [v for v in versions.history.values() if fingerprint(v) != versions.fingerprint]
    assert older, "JobState has older versions in schemas/history"
    doc = {"cluster": "c", "scheduler": "flux", "job_id": "1", "incarnation": 0,
           "revision": 3, "updated_at": 5}
    old = older[0]
    body = _fastavro(old, {f["name"]: doc.get(f["name"], f.get("default"))
                           for f in old["fields"]})
    got = codec.decode(b"\xc3\x01" + fingerprint(old) + body)
    assert got["revision"] == 3
    assert got["cluster"] == "c"


def test_the_codec_refuses_what_the_reader_refuses() -> None:
    codec = AvroCodec("JobEvent")
    good = codec.encode({"cluster": "c", "scheduler": "flux", "job_id": "1", "event": "submit",
                         "timestamp": 1.0, "source": "s", "event_id": "e", "seq": 0,
                         "context": "{}", "facts": "{}"})
    assert codec.decode(good)["event"] == "submit"
    with pytest.raises(ParseError, match="bytes left"):
        codec.decode(good + b"\0")
    with pytest.raises(ParseError, match="does not decode"):
        codec.decode(good[:-3])


@given(st.integers(-(1 << 63), (1 << 63) - 1))
def test_read_long_reads_write_long(n: int) -> None:
    out = bytearray(b"x")
    write_long(n, out)
    assert read_long(bytes(out), 1) == (n, len(out))


def test_a_long_of_more_than_ten_bytes_is_refused() -> None:
    with pytest.raises(ValueError, match="10 bytes"):
        read_long(b"\xff" * 11, 0)


@pytest.mark.parametrize(("schema", "body", "error"), [
    (["null", "string"], b"\x04", ValueError),  # union index 2
    ("boolean", b"\x02", ValueError),
    ("string", b"\x01", ValueError),  # length -1
    ("string", b"\x08ab", EOFError),  # 4 bytes announced, 2 there
    ("double", b"\x00" * 7, Exception),
    ("long", b"\x80", IndexError),
])
def test_invalid_values_raise(schema: Any, body: bytes, error: type[Exception]) -> None:
    read = compile_reader(parse_schema({"type": "record", "name": "R",
                                        "fields": [{"name": "x", "type": schema}]}))
    with pytest.raises(error):
        read(body, 0)


def test_a_schema_it_does_not_cover_is_left_to_fastavro() -> None:
    wide = parse_schema({"type": "record", "name": "Wide", "fields": [
        {"name": "u", "type": ["null", "long", "string"]}]})
    with pytest.raises(Unsupported):
        compile_reader(wide)
