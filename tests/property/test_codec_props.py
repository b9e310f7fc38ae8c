"""Property tests of the Avro codec: any record of a schema round-trips in both wire
formats; any bytes, and any damage to a valid message, give a decoded record or a
ParseError, never another exception."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.codecs.codec import AvroCodec, registry_client
from pipeline.codecs.schemas import SCHEMA_NAMES, load_schema
from pipeline.runtime.errors import ParseError

LONG = st.integers(min_value=-(2**63), max_value=2**63 - 1)
PRIMITIVES: dict[str, st.SearchStrategy[Any]] = {
    "null": st.none(),
    "boolean": st.booleans(),
    "int": st.integers(min_value=-(2**31), max_value=2**31 - 1),
    "long": LONG,
    # NaN never equals itself; everything else must come back bit for bit
    "double": st.floats(allow_nan=False),
    "string": st.text(max_size=20),
    "bytes": st.binary(max_size=40),
}


def avro_values(schema: Any, named: dict[str, Any] | None = None) -> st.SearchStrategy[Any]:
    """Values valid for a parsed fastavro schema (the types jobstream's schemas use)."""
    named = {} if named is None else named
    if isinstance(schema, str):
        return PRIMITIVES[schema] if schema in PRIMITIVES else named[schema]
    if isinstance(schema, list):
        return st.one_of([avro_values(s, named) for s in schema])
    kind = schema["type"]
    if kind == "array":
        return st.lists(avro_values(schema["items"], named), max_size=4)
    if kind == "map":
        return st.dictionaries(st.text(max_size=10), avro_values(schema["values"], named),
                               max_size=4)
    if kind == "record":
        strategy = st.fixed_dictionaries({f["name"]: avro_values(f["type"], named)
                                          for f in schema["fields"]})
        named[schema["name"]] = strategy
        return strategy
    return avro_values(kind, named)


CODECS = {name: AvroCodec(name) for name in SCHEMA_NAMES}
REGISTRY = registry_client("mock://props")
REGISTRY_CODECS = {name: AvroCodec(name, registry=REGISTRY, subject=f"{name}-value")
                   for name in SCHEMA_NAMES}
RECORDS = st.sampled_from(SCHEMA_NAMES).flatmap(
    lambda n: st.tuples(st.just(n), avro_values(load_schema(n).current)))


@given(RECORDS)
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
def test_any_record_round_trips_in_both_formats(named: tuple[str, dict[str, Any]]) -> None:
    name, rec = named
    assert CODECS[name].decode(CODECS[name].encode(rec)) == rec
    assert REGISTRY_CODECS[name].decode(REGISTRY_CODECS[name].encode(rec)) == rec


def _decode_or_parse_error(codec: AvroCodec, data: bytes) -> None:
    try:
        out = codec.decode(data)
    except ParseError as exc:
        assert exc.reason in {"not-avro", "bad-avro", "unknown-schema"}
    else:
        assert isinstance(out, dict)


@given(st.sampled_from(SCHEMA_NAMES), st.binary(max_size=200),
       st.sampled_from([b"", b"\xc3\x01", b"\x00\x00\x00\x00\x01"]))
@settings(max_examples=500)
def test_any_bytes_decode_or_raise_parse_error(name: str, body: bytes, prefix: bytes) -> None:
    _decode_or_parse_error(REGISTRY_CODECS[name], prefix + body)


@given(RECORDS, st.data())
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
def test_damaged_messages_decode_or_raise_parse_error(
        named: tuple[str, dict[str, Any]], data: st.DataObject) -> None:
    name, rec = named
    codec = data.draw(st.sampled_from([CODECS[name], REGISTRY_CODECS[name]]))
    msg = bytearray(codec.encode(rec))
    # damage the body, not the header: header damage is covered by the test above
    header = 10 if msg[0] == 0xC3 else 5
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        if len(msg) <= header:
            break
        pos = data.draw(st.integers(min_value=header, max_value=len(msg) - 1))
        action = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        if action == "flip":
            msg[pos] ^= data.draw(st.integers(min_value=1, max_value=255))
        elif action == "cut":
            del msg[pos:]
        else:
            msg.insert(pos, data.draw(st.integers(min_value=0, max_value=255)))
    _decode_or_parse_error(codec, bytes(msg))
