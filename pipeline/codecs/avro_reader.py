"""Avro binary bodies read by a function compiled once from the schema.

Written by hand for the reason :mod:`pipeline.codecs.avro_writer` is: fastavro's reader walks the
schema again for every value and reads each primitive through a file object, about 1.2 µs
per field: 95 µs for a job state of 79 mostly nullable fields, which the sink reads for
every state it indexes, and 15 µs for each event, read by the sink too. :func:`compile_reader`
turns a parsed schema into the source of one Python function per record that reads from
the bytes at an offset, with a one-byte long read inline, each union's branch chosen by
its index byte and the field names bound at compile time.

It reads data written with the schema it was compiled from, which is what the codec asks
of it: resolving an older writer schema to the current one stays with fastavro. It covers
what :mod:`pipeline.codecs.avro_writer` covers (null, boolean, int, long, float, double, string,
bytes, arrays, maps, records and references to named records, unions of null and one
other type) and raises :class:`~pipeline.codecs.avro_compile.Unsupported` for any other schema.
The values are fastavro's, field for field: a hypothesis property checks it on every
schema of ``schemas/`` (``tests/unit/test_avro_reader.py``). A body that is not valid
raises EOFError, IndexError, ValueError, UnicodeDecodeError or ``struct.error``, which
the codec reports as ``bad-avro``; a union index or boolean byte in a form no Avro
writer writes (a long in more bytes than it needs) is refused, where fastavro may read it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from typing import Any

from pipeline.codecs.avro_compile import SchemaCompiler, Unsupported, compile_record

__all__ = ["Reader", "compile_reader", "read_long"]

#: ``read(data, offset) -> (record, offset after it)``
Reader = Callable[[bytes, int], tuple[dict[str, Any], int]]

def read_long(data: bytes, pos: int) -> tuple[int, int]:
    """An Avro long (zig-zag varint) at ``pos``: ``(value, offset after it)``."""
    b = data[pos]
    pos += 1
    n = b & 0x7F
    shift = 7
    while b & 0x80:
        if shift >= 70:
            raise ValueError("an Avro long longer than 10 bytes")
        b = data[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        shift += 7
    return (n >> 1) ^ -(n & 1), pos


def _bad(what: str, pos: int) -> Exception:
    return ValueError(f"invalid {what} at byte {pos}")


_ENV: dict[str, Any] = {
    "read_long": read_long, "bad": _bad,
    "unpack_double": struct.Struct("<d").unpack_from,
    "unpack_float": struct.Struct("<f").unpack_from,
}


class _Compiler(SchemaCompiler):
    """Source of one function per record type, ``r_<n>(data, pos) -> (dict, pos)``."""

    prefix = "r"

    def _record(self, fn: str, schema: Mapping[str, Any]) -> list[str]:
        lines = [f"def {fn}(data, pos):", "    size = len(data)"]
        names = []
        for field in schema["fields"]:
            var = self._var()
            self.value(field["type"], var, lines, 1)
            names.append(f"{field['name']!r}: {var}")
        lines.append(f"    return {{{', '.join(names)}}}, pos")
        return lines

    def _complex(self, schema: Mapping[str, Any], var: str, lines: list[str],
                 depth: int) -> None:
        pad = "    " * depth
        kind = schema["type"]
        if kind == "record":
            lines.append(f"{pad}{var}, pos = {self.record(schema)}(data, pos)")
        elif kind in ("array", "map"):
            count, item, key = self._var(), self._var(), self._var()
            lines += [f"{pad}{var} = {'[]' if kind == 'array' else '{}'}",
                      f"{pad}while True:"]
            lines.extend(f"{pad}    {line}" for line in _long(count))
            lines += [f"{pad}    if not {count}:",
                      f"{pad}        break",
                      f"{pad}    if {count} < 0:  # a block with its size in bytes",
                      f"{pad}        {count} = -{count}",
                      f"{pad}        _, pos = read_long(data, pos)",
                      f"{pad}    for _ in range({count}):"]
            if kind == "array":
                self.value(schema["items"], item, lines, depth + 2)
                lines.append(f"{pad}        {var}.append({item})")
            else:
                self.value("string", key, lines, depth + 2)
                self.value(schema["values"], item, lines, depth + 2)
                lines.append(f"{pad}        {var}[{key}] = {item}")
        else:
            raise Unsupported(f"type {kind}")

    def _primitive(self, kind: str, var: str) -> list[str]:
        return _primitive(kind, var, self._var)

    def _nullable(self, other: Any, null: int, var: str, lines: list[str],
                  depth: int) -> None:
        pad = "    " * depth
        index = self._var()
        # the branch index is a long: 0 is the byte 0, 1 the byte 2 (zig-zag)
        lines += [f"{pad}{index} = data[pos]",
                  f"{pad}pos += 1",
                  f"{pad}if {index} == {2 * null}:",
                  f"{pad}    {var} = None",
                  f"{pad}elif {index} == {2 * (1 - null)}:"]
        self.value(other, var, lines, depth + 1)
        lines += [f"{pad}else:",
                  f"{pad}    raise bad('union index', pos - 1)"]


def _long(var: str) -> list[str]:
    # most longs here (lengths, counts, small numbers) are one byte
    return [f"{var} = data[pos]",
            f"if {var} < 0x80:",
            f"    {var} = ({var} >> 1) ^ -({var} & 1)",
            "    pos += 1",
            "else:",
            f"    {var}, pos = read_long(data, pos)"]


def _primitive(kind: str, var: str, new_var: Callable[[], str]) -> list[str]:
    if kind == "null":
        return [f"{var} = None"]
    if kind in ("int", "long"):
        return _long(var)
    if kind == "double":
        return [f"{var} = unpack_double(data, pos)[0]", "pos += 8"]
    if kind == "float":
        return [f"{var} = unpack_float(data, pos)[0]", "pos += 4"]
    if kind == "boolean":
        return [f"{var} = data[pos]",
                f"if {var} > 1:",
                "    raise bad('boolean', pos)",
                f"{var} = {var} == 1",
                "pos += 1"]
    end = new_var()
    take = f"data[pos:{end}]" if kind == "bytes" else f"data[pos:{end}].decode()"
    return [*_long(end),
            f"if {end} < 0:",
            f"    raise bad('{kind} length', pos)",
            f"{end} += pos",
            f"if {end} > size:",
            f"    raise EOFError('{kind} past the end of the body')",
            f"{var} = {take}",
            f"pos = {end}"]


def compile_reader(schema: Mapping[str, Any]) -> Reader:
    """The reader of a record schema parsed by fastavro (its ``__named_schemas`` resolve
    references): ``read(data, offset)`` reads the body of a record written with this
    schema from ``data`` (bytes) at ``offset`` and returns it with the offset after it.
    Raises :class:`Unsupported` for a schema it does not cover."""
    reader: Reader = compile_record(schema, _Compiler, _ENV)
    return reader
