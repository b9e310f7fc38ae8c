"""Avro values of jobstream's topics, in the two framings of docs/design.md, section 3.

* **Single-object encoding** (no registry): ``C3 01``, the 8-byte little-endian
  CRC-64-AVRO fingerprint of the writer schema's parsing canonical form, the Avro body.
  The reader knows every writer schema by fingerprint from ``schemas/history/``.
* **Confluent wire format** (``kafka.schema_registry_url`` set): byte ``00``, the 4-byte
  big-endian schema id, the Avro body. The schema is registered under ``<topic>-value``
  on first encode; readers fetch writer schemas by id from the registry.

``decode`` tells the two apart by the first bytes, so a topic may hold both (a site that
adds a registry later keeps reading its old data). Data written with an older schema is
resolved to the current one. Input that cannot be decoded raises :class:`ParseError`
(reasons ``not-avro``, ``bad-avro``, ``unknown-schema``) for the DLQ; a registry that
cannot be reached raises :class:`ServiceError`, which is not the record's fault.

Schemas are parsed once per codec; ``encode``/``decode`` do no schema work on the hot path.
Encoding uses a writer compiled from the schema (:mod:`pipeline.codecs.avro_writer`), and decoding
data of the current schema a reader compiled from it (:mod:`pipeline.codecs.avro_reader`);
fastavro's where the schema has what they do not cover, and to resolve older versions.
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Mapping
from dataclasses import MISSING, fields
from typing import TYPE_CHECKING, Any

from fastavro import schemaless_reader, schemaless_writer
from fastavro.read import SchemaResolutionError
from fastavro.schema import parse_schema

from pipeline.codecs.avro_reader import Reader, compile_reader
from pipeline.codecs.avro_writer import Unsupported, Writer, compile_writer
from pipeline.codecs.raw import raw_from_avro, raw_to_avro
from pipeline.codecs.schemas import SchemaVersions, fingerprint, load_schema
from pipeline.codecs.single_object import ENCODE_ERRORS, SINGLE_OBJECT_MAGIC, check_fields
from pipeline.core.jsontext import dumps_text
from pipeline.core.model import (
    EVENT_FIELDS,
    EVENT_OBJECTS,
    EVENT_PAYLOADS,
    JobEvent,
)
from pipeline.runtime.config import Config
from pipeline.runtime.errors import ParseError, ServiceError

if TYPE_CHECKING:
    from confluent_kafka.schema_registry import SchemaRegistryClient

__all__ = [
    "TOPIC_SCHEMAS",
    "AvroCodec",
    "codecs_from_config",
    "event_from_avro",
    "event_to_avro",
    "raw_from_avro",
    "raw_to_avro",
    "registry_client",
]

CONFLUENT_MAGIC = 0
_SINGLE_HEADER_LEN = 10
_CONFLUENT_HEADER_LEN = 5
_ID = struct.Struct(">I")

#: config ``topics.<key>`` -> the schema of that topic's values (the DLQ holds raw bytes).
TOPIC_SCHEMAS: Mapping[str, str] = {
    "raw": "RawRecord",
    "events": "JobEvent",
    "state": "JobState",
    "snapshots": "QueueSnapshot",
    "nodes": "NodeState",
    "node_events": "NodeEvent",
}

# A writer schema the reader knows: the parsed schema, or None when it is the reader's
# own (no resolution needed, the fast path).
_Writer = Mapping[str, Any] | None
_UNSEEN: Any = object()


class AvroCodec:
    """Encode and decode the values of one schema.

    ``registry`` switches encoding to the Confluent wire format, registering the schema
    under ``subject`` (``<topic>-value``); without it, single-object encoding is used.
    """

    def __init__(self, name: str, *, registry: SchemaRegistryClient | None = None,
                 subject: str | None = None, versions: SchemaVersions | None = None) -> None:
        if registry is not None and not subject:
            raise ValueError("a registry needs the subject to register the schema under")
        v = versions if versions is not None else load_schema(name)
        self.name = name
        self.subject = subject
        self._versions = v
        self._schema = v.current
        self._fields = v.field_names
        self._fingerprint = v.fingerprint
        self._by_fingerprint: dict[bytes, _Writer] = {
            fp: (None if fp == self._fingerprint else s)
            for fp, s in ((fingerprint(s), s) for s in v.history.values())
        }
        self._by_fingerprint[self._fingerprint] = None
        self._registry = registry
        self._schema_id: int | None = None
        self._by_id: dict[int, _Writer] = {}
        self._header = SINGLE_OBJECT_MAGIC + self._fingerprint
        self._write: Writer | None
        try:
            self._write = compile_writer(self._schema)
        except Unsupported:
            self._write = None
        self._read_current: Reader | None
        try:
            self._read_current = compile_reader(self._schema)
        except Unsupported:
            self._read_current = None

    @property
    def wire_format(self) -> str:
        """``confluent`` with a registry, else ``single-object``."""
        return "confluent" if self._registry is not None else "single-object"

    # -- encoding --------------------------------------------------------------------

    def encode(self, obj: Mapping[str, Any]) -> bytes:
        """``obj`` (a dict of the schema's fields; absent optional ones take their default)
        -> the framed Avro bytes. Raises ParseError ``invalid-record`` if it does not fit."""
        header = self._header if self._registry is None else self._confluent_header()
        check_fields(self.name, self._fields, obj)
        out = bytearray(header)
        try:
            if self._write is not None:
                self._write(obj, out)
            else:
                buf = io.BytesIO()
                schemaless_writer(buf, self._schema, obj)
                out += buf.getbuffer()
        except ENCODE_ERRORS as exc:
            raise ParseError("invalid-record", f"{self.name}: {exc}") from exc
        return bytes(out)

    def _confluent_header(self) -> bytes:
        if self._schema_id is None:
            self._schema_id = self._register()
            self._header = bytes([CONFLUENT_MAGIC]) + _ID.pack(self._schema_id)
        return self._header

    def _register(self) -> int:
        from confluent_kafka.schema_registry import Schema

        assert self._registry is not None and self.subject is not None
        try:
            return int(self._registry.register_schema(
                self.subject, Schema(self._versions.text, "AVRO")))
        except Exception as exc:  # the client raises its own errors and httpx ones
            raise ServiceError(f"schema registry refused or failed to register "
                               f"{self.name} under {self.subject}: {exc}") from exc

    # -- decoding --------------------------------------------------------------------

    def decode(self, data: bytes) -> dict[str, Any]:
        """Framed Avro bytes of either wire format -> a dict of the current schema."""
        if not data:
            raise ParseError("not-avro", f"{self.name}: empty value (a tombstone?)")
        if data[:2] == SINGLE_OBJECT_MAGIC:
            if len(data) < _SINGLE_HEADER_LEN:
                raise ParseError("bad-avro", f"{self.name}: single-object header truncated "
                                             f"({len(data)} bytes)")
            fp = data[2:_SINGLE_HEADER_LEN]
            try:
                writer = self._by_fingerprint[fp]
            except KeyError:
                raise ParseError("unknown-schema", f"{self.name}: no known version has "
                                                   f"fingerprint {fp.hex()}") from None
            return self._read(data, _SINGLE_HEADER_LEN, writer)
        if data[:1] == b"\x00":
            if len(data) < _CONFLUENT_HEADER_LEN:
                raise ParseError("bad-avro", f"{self.name}: Confluent header truncated "
                                             f"({len(data)} bytes)")
            (schema_id,) = _ID.unpack_from(data, 1)
            writer = self._by_id.get(schema_id, _UNSEEN)
            if writer is _UNSEEN:
                writer = self._writer_for_id(schema_id)
            return self._read(data, _CONFLUENT_HEADER_LEN, writer)
        raise ParseError("not-avro", f"{self.name}: starts with {bytes(data[:2]).hex()}, "
                                     "neither Avro single-object (c301) nor Confluent (00)")

    def _read(self, data: bytes, offset: int, writer: _Writer) -> dict[str, Any]:
        try:
            if writer is None and self._read_current is not None:
                out, end = self._read_current(bytes(data), offset)
            else:
                buf = io.BytesIO(data)
                buf.seek(offset)
                if writer is None:
                    out = schemaless_reader(buf, self._schema, None)
                else:
                    out = schemaless_reader(buf, writer, self._schema)
                end = buf.tell()
        except SchemaResolutionError as exc:
            raise ParseError("unknown-schema", f"{self.name}: the writer schema does not "
                                               f"resolve to the current one: {exc}") from exc
        except Exception as exc:  # any malformed body; bad input must never escape raw
            raise ParseError("bad-avro", f"{self.name}: body does not decode: "
                                         f"{type(exc).__name__}: {exc}") from exc
        if end != len(data):
            raise ParseError("bad-avro", f"{self.name}: {len(data) - end} bytes left "
                                         "after the record")
        if not isinstance(out, dict):
            raise ParseError("bad-avro", f"{self.name}: body is not a record")
        return out

    def _writer_for_id(self, schema_id: int) -> _Writer:
        if self._registry is None:
            raise ParseError("unknown-schema", f"{self.name}: Confluent-framed message (schema "
                                               f"id {schema_id}) but no schema registry is "
                                               "configured (kafka.schema_registry_url)")
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            schema = self._registry.get_schema(schema_id)
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                raise ParseError("unknown-schema", f"{self.name}: schema id {schema_id} is "
                                                   "not in the registry") from exc
            raise ServiceError(f"schema registry failed to return id {schema_id}: "
                               f"{exc}") from exc
        except Exception as exc:  # connection errors surface as httpx exceptions
            raise ServiceError(f"schema registry unreachable fetching id {schema_id}: "
                               f"{exc}") from exc
        writer = self._resolve_registered(schema_id, schema.schema_type, schema.schema_str)
        self._by_id[schema_id] = writer
        return writer

    def _resolve_registered(self, schema_id: int, schema_type: str | None,
                            text: str | None) -> _Writer:
        if (schema_type or "AVRO") != "AVRO" or not text:
            raise ParseError("unknown-schema", f"{self.name}: schema id {schema_id} is "
                                               f"{schema_type}, not Avro")
        try:
            parsed = parse_schema(json.loads(text))
        except Exception as exc:  # a registry may hold schemas fastavro rejects
            raise ParseError("unknown-schema", f"{self.name}: schema id {schema_id} does not "
                                               f"parse: {exc}") from exc
        if not isinstance(parsed, dict) or parsed.get("name") != self._schema["name"]:
            other = parsed.get("name") if isinstance(parsed, dict) else parsed
            raise ParseError("unknown-schema", f"{self.name}: schema id {schema_id} is {other}, "
                                               f"not {self._schema['name']}")
        fp = fingerprint(parsed)
        if fp in self._by_fingerprint:
            return self._by_fingerprint[fp]
        return parsed


def registry_client(url: str, conf: Mapping[str, Any] | None = None) -> SchemaRegistryClient:
    """A schema registry client for ``url`` (``mock://…`` gives the in-process mock);
    ``conf`` adds client properties (``basic.auth.user.info``, ``max.retries``, ...)."""
    # Imported here: the client pulls in httpx and authlib (~25 MiB resident), which
    # producer edges without a registry should not pay for.
    from confluent_kafka.schema_registry import SchemaRegistryClient

    return SchemaRegistryClient.new_client({**(conf or {}), "url": url})


def codecs_from_config(cfg: Config, registry: SchemaRegistryClient | None = None
                       ) -> dict[str, AvroCodec]:
    """One codec per topic key of :data:`TOPIC_SCHEMAS`, sharing one registry client
    (``registry``, else one for ``kafka.schema_registry_url`` if set)."""
    if registry is None and cfg.kafka.schema_registry_url:
        registry = registry_client(cfg.kafka.schema_registry_url)
    return {
        key: AvroCodec(name, registry=registry,
                       subject=f"{getattr(cfg.topics, key)}-value" if registry else None)
        for key, name in TOPIC_SCHEMAS.items()
    }


# -- the model <-> Avro dicts ---------------------------------------------------------

def _json_text(value: Any, what: str) -> str:
    try:
        return dumps_text(value)
    except (TypeError, ValueError) as exc:
        raise ParseError("invalid-record", f"JobEvent.{what} is not JSON: {exc}") from exc


def _json_value(text: str | None, what: str) -> Any:
    if text is None:
        return None
    if text == "{}":
        return {}
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ParseError("bad-avro", f"JobEvent.{what} is not JSON text: {exc}") from exc


def event_to_avro(ev: JobEvent) -> dict[str, Any]:
    """A :class:`JobEvent` -> the dict ``AvroCodec("JobEvent").encode`` takes."""
    d = {name: getattr(ev, name) for name in EVENT_FIELDS}
    for name in EVENT_OBJECTS:
        d[name] = _json_text(dict(d[name]), name) if d[name] else "{}"
    for name in EVENT_PAYLOADS:
        d[name] = None if d[name] is None else _json_text(d[name], name)
    return d


def event_from_avro(d: Mapping[str, Any]) -> JobEvent:
    """A decoded ``JobEvent`` dict -> :class:`JobEvent` (JSON text fields parsed)."""
    values = {name: d[name] if name in _EVENT_REQUIRED else d.get(name) for name in EVENT_FIELDS}
    for name in EVENT_OBJECTS:
        values[name] = _json_value(values[name], name) or {}
    for name in EVENT_PAYLOADS:
        values[name] = _json_value(values[name], name)
    return JobEvent(**values)


#: the fields a JobEvent cannot be without (the others have defaults)
_EVENT_REQUIRED = frozenset(f.name for f in fields(JobEvent) if f.default is MISSING
                            and f.default_factory is MISSING)
