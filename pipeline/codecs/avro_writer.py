"""Avro binary bodies written by a function compiled once from the schema.

Written by hand because fastavro's writer, the one library that writes Avro fast enough
in Python, walks the schema again for every value and picks each union's branch by
validating the value against the branches in turn: about 1.5 µs per field, 130 µs for a
job state of 79 mostly nullable fields, which the worker writes once per job per batch,
and 15 µs for each event. :func:`compile_writer` turns a parsed schema into the source
of one Python function per record, with each union's branch chosen by ``is None`` and
the field names and defaults bound at compile time: three to four times faster.

It covers what jobstream's schemas use: null, boolean, int, long, float, double, string,
bytes, arrays, maps, records and references to named records, and unions of null and one
other type. For any other schema it raises :class:`Unsupported` and the codec keeps
fastavro's writer.
Data of the current schema is read back by its compiled reader (:mod:`pipeline.codecs.avro_reader`),
older versions by fastavro (resolving old writer schemas is its strength). The bytes
are fastavro's, field for field: a hypothesis property checks it on every schema of
``schemas/`` (``tests/unit/test_avro_writer.py``). A value of the wrong type raises
(TypeError, ValueError, AttributeError or ``struct.error``), as fastavro's writer does.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Mapping
from typing import Any

from pipeline.codecs.avro_compile import SchemaCompiler, Unsupported, compile_record

__all__ = ["Unsupported", "Writer", "compile_writer", "write_long"]

Writer = Callable[[Mapping[str, Any], bytearray], None]

_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1

def write_long(n: int, out: bytearray) -> None:
    """An Avro long (zig-zag varint)."""
    if not _LONG_MIN <= n <= _LONG_MAX:
        raise ValueError(f"{n!r} is not an Avro long")
    n = (n << 1) ^ (n >> 63)
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _write_int(n: int, out: bytearray) -> None:
    if not _INT_MIN <= n <= _INT_MAX:
        raise ValueError(f"{n!r} is not an Avro int")
    write_long(n, out)


def _write_string(s: str, out: bytearray) -> None:
    b = s.encode()
    write_long(len(b), out)
    out += b


def _write_bytes(b: bytes, out: bytearray) -> None:
    if not isinstance(b, bytes | bytearray | memoryview):
        raise TypeError(f"{type(b).__name__} is not Avro bytes")
    write_long(len(b), out)
    out += b


def _write_boolean(v: bool, out: bytearray) -> None:
    if v is not True and v is not False:
        raise TypeError(f"{v!r} is not an Avro boolean")
    out.append(1 if v else 0)


_pack_float32 = struct.Struct("<f").pack


def _pack_float(v: float) -> bytes:
    try:
        return _pack_float32(v)
    except OverflowError:  # out of a float's range: infinity, as C's cast in fastavro
        return _pack_float32(math.copysign(math.inf, v))


def _check_array(v: Any) -> None:
    if not isinstance(v, list | tuple):
        raise TypeError(f"{type(v).__name__} is not an Avro array")


def _check_map(v: Any) -> None:
    if not isinstance(v, Mapping):
        raise TypeError(f"{type(v).__name__} is not an Avro map")


_ENV: dict[str, Any] = {
    "write_long": write_long, "write_int": _write_int, "write_string": _write_string,
    "write_bytes": _write_bytes, "write_boolean": _write_boolean,
    "pack_double": struct.Struct("<d").pack, "pack_float": _pack_float,
    "check_array": _check_array, "check_map": _check_map,
}


class _Compiler(SchemaCompiler):
    """Source of one function per record type, ``w_<n>(datum, out)``."""

    prefix = "w"

    def _record(self, fn: str, schema: Mapping[str, Any]) -> list[str]:
        lines = [f"def {fn}(d, out):"]
        for field in schema["fields"]:
            var = self._var()
            default = field.get("default")
            if default is None:
                lines.append(f"    {var} = d.get({field['name']!r})")
            else:
                const = self._const(default)
                lines.append(f"    {var} = d.get({field['name']!r}, {const})")
            self.value(field["type"], var, lines, 1)
        if len(lines) == 1:
            lines.append("    pass")
        return lines

    def _complex(self, schema: Mapping[str, Any], var: str, lines: list[str],
                 depth: int) -> None:
        pad = "    " * depth
        kind = schema["type"]
        if kind == "record":
            lines.append(f"{pad}{self.record(schema)}({var}, out)")
        elif kind == "array":
            item = self._var()
            lines += [f"{pad}check_array({var})",
                      f"{pad}if {var}:",
                      f"{pad}    write_long(len({var}), out)",
                      f"{pad}    for {item} in {var}:"]
            self.value(schema["items"], item, lines, depth + 2)
            lines.append(f"{pad}out.append(0)")
        elif kind == "map":
            key, item = self._var(), self._var()
            lines += [f"{pad}check_map({var})",
                      f"{pad}if {var}:",
                      f"{pad}    write_long(len({var}), out)",
                      f"{pad}    for {key}, {item} in {var}.items():",
                      f"{pad}        write_string({key}, out)"]
            self.value(schema["values"], item, lines, depth + 2)
            lines.append(f"{pad}out.append(0)")
        else:
            raise Unsupported(f"type {kind}")

    def _primitive(self, kind: str, var: str) -> list[str]:
        return _primitive(kind, var)

    def _nullable(self, other: Any, null: int, var: str, lines: list[str],
                  depth: int) -> None:
        pad = "    " * depth
        lines += [f"{pad}if {var} is None:",
                  f"{pad}    out.append({2 * null})",
                  f"{pad}else:",
                  f"{pad}    out.append({2 * (1 - null)})"]
        self.value(other, var, lines, depth + 1)

    def _const(self, value: Any) -> str:
        name = f"c{len(self.constants)}"
        self.constants[name] = value
        return name


def _primitive(kind: str, var: str) -> list[str]:
    if kind == "null":
        return [f"if {var} is not None: raise TypeError('not null: %r' % ({var},))"]
    if kind == "double":
        return [f"out += pack_double({var})"]
    if kind == "float":
        return [f"out += pack_float({var})"]
    return [f"write_{kind}({var}, out)"]


def compile_writer(schema: Mapping[str, Any]) -> Writer:
    """The writer of a record schema parsed by fastavro (its ``__named_schemas``
    resolve references): ``write(datum, out)`` appends the Avro body of ``datum`` to
    ``out``. Raises :class:`Unsupported` for a schema it does not cover."""
    writer: Writer = compile_record(schema, _Compiler, _ENV)
    return writer
