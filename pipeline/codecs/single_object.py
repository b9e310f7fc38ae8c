"""Avro single-object encoding of one schema, written without fastavro: the edges'
writer of ``hpc.jobs.raw`` where no schema registry is configured.

The node daemon runs on every compute node within 40 MiB (issue 33), and fastavro with
the compression library it loads (cramjam) is 3.5 MiB of it, for two things an edge that
only writes needs once: the schema's fingerprint and a parsed schema to compile the
writer from. So this writer takes the fingerprint from ``schemas/fingerprints.json``,
computed by fastavro (:func:`pipeline.codecs.schemas.fingerprints`) and checked against it
by ``tests/unit/test_schemas.py``, and compiles :mod:`pipeline.codecs.avro_writer`'s writer
from the schema file as written (a schema it does not cover there, a named type
referenced by name for one, raises :class:`Unsupported`: use
:class:`~pipeline.codecs.codec.AvroCodec`). Its bytes are :class:`AvroCodec`'s, header and
body, and so are its errors (``tests/unit/test_single_object.py``).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline.codecs.avro_writer import Unsupported, Writer, compile_writer
from pipeline.codecs.schemas import FINGERPRINTS_FILE, schema_dir
from pipeline.runtime.errors import JobstreamError, ParseError

__all__ = ["ENCODE_ERRORS", "SINGLE_OBJECT_MAGIC", "SingleObjectWriter", "Unsupported",
           "check_fields", "shipped_fingerprint"]

SINGLE_OBJECT_MAGIC = b"\xc3\x01"
#: what a compiled writer raises for a value that does not fit its schema
ENCODE_ERRORS = (ValueError, TypeError, OverflowError, AttributeError, KeyError, struct.error)


def shipped_fingerprint(name: str, directory: Path | None = None) -> bytes:
    """The fingerprint of schema ``name``'s current version from ``fingerprints.json``."""
    path = (directory or schema_dir()) / FINGERPRINTS_FILE
    try:
        return bytes.fromhex(json.loads(path.read_text())[name])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise JobstreamError(f"{path}: no fingerprint of {name}: {exc}") from exc


def check_fields(name: str, fields: frozenset[str], obj: Mapping[str, Any]) -> None:
    """ParseError ``invalid-record`` for a key of ``obj`` the schema has no field for."""
    # a writer silently drops keys the schema lacks; a field someone forgot to add to
    # the schema must fail loudly instead of vanishing from the topic
    if not obj.keys() <= fields:
        extra = ", ".join(sorted(set(obj) - fields))
        raise ParseError("invalid-record", f"{name} has no field(s) {extra}; "
                                           f"add them to schemas/{name}.avsc")


class SingleObjectWriter:
    """``encode(obj)``: ``C3 01``, the fingerprint, the Avro body of ``obj``."""

    def __init__(self, name: str, directory: Path | None = None) -> None:
        directory = directory or schema_dir()
        path = directory / f"{name}.avsc"
        try:
            schema = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise JobstreamError(f"Avro schema {path} cannot be read: {exc}") from exc
        self.name = name
        self._fields = frozenset(f["name"] for f in schema["fields"])
        self._write: Writer = compile_writer(schema)
        self._header = SINGLE_OBJECT_MAGIC + shipped_fingerprint(name, directory)

    @property
    def wire_format(self) -> str:
        return "single-object"

    def encode(self, obj: Mapping[str, Any]) -> bytes:
        """``obj`` (a dict of the schema's fields; absent optional ones take their default)
        -> the framed Avro bytes. Raises ParseError ``invalid-record`` if it does not fit."""
        check_fields(self.name, self._fields, obj)
        out = bytearray(self._header)
        try:
            self._write(obj, out)
        except ENCODE_ERRORS as exc:
            raise ParseError("invalid-record", f"{self.name}: {exc}") from exc
        return bytes(out)
