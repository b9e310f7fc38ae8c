"""What the compiled Avro writer and reader share: the walk of a schema into source.

:mod:`pipeline.codecs.avro_writer` and :mod:`pipeline.codecs.avro_reader` each turn a
parsed schema into the source of one Python function per record type. How they walk the
schema is the same (named references resolved, each record compiled once, unions of null
and one other type only, anything else :class:`Unsupported`), and so is how the source
becomes a function; only what a value compiles to differs. So the walk is here once, and
each of them says what a record, a complex type, a primitive and a nullable value become.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["SchemaCompiler", "Unsupported", "compile_record", "resolve"]

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "string",
                         "bytes"})


class Unsupported(Exception):
    """The schema has a type the compilers do not compile."""


def resolve(schema: Any, named: Mapping[str, Any]) -> str | list[Any] | Mapping[str, Any]:
    """A parsed schema (or a part of one) as what the compilers look at: a union (a list),
    a primitive's name, or the mapping of a complex type, named references resolved.
    Raises :class:`Unsupported` for a name not known or a logical type."""
    if isinstance(schema, list):
        return schema
    if isinstance(schema, Mapping) and set(schema) - {"type"} == set() \
            and isinstance(schema["type"], str):
        schema = schema["type"]
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return schema
        if schema not in named:
            raise Unsupported(f"unknown named type {schema}")
        schema = named[schema]
    if not isinstance(schema, Mapping):
        raise Unsupported(f"schema {schema!r}")
    if "logicalType" in schema:
        raise Unsupported(f"logical type {schema['logicalType']}")
    return schema


class SchemaCompiler:
    """Source of one function per record type, ``<prefix>_<n>``; a subclass says what a
    record's body (:meth:`_record`), a complex type (:meth:`_complex`), a primitive
    (:meth:`_primitive`) and a nullable value (:meth:`_nullable`) compile to."""

    #: the first letter of the functions' names
    prefix = ""

    def __init__(self, named: Mapping[str, Any]) -> None:
        self.named = dict(named)
        self.functions: dict[str, str] = {}  # record name -> its function's name
        self.sources: list[str] = []
        #: values the source names, bound in the functions' namespace
        self.constants: dict[str, Any] = {}
        self._vars = 0

    def record(self, schema: Mapping[str, Any]) -> str:
        """The name of the function of records of ``schema`` (compiled once)."""
        name = schema["name"]
        fn = self.functions.get(name)
        if fn is not None:
            return fn
        fn = self.functions[name] = f"{self.prefix}_{len(self.functions)}"
        self.sources.append("\n".join(self._record(fn, schema)))
        return fn

    def value(self, schema: Any, var: str, lines: list[str], depth: int) -> None:
        """Append to ``lines`` (indented ``depth`` levels) what a value of ``schema`` in
        ``var`` compiles to."""
        pad = "    " * depth
        schema = resolve(schema, self.named)
        if isinstance(schema, list):
            self._union(schema, var, lines, depth)
            return
        if isinstance(schema, str):
            lines.extend(pad + line for line in self._primitive(schema, var))
            return
        self._complex(schema, var, lines, depth)

    def _union(self, branches: list[Any], var: str, lines: list[str], depth: int) -> None:
        if len(branches) != 2 or "null" not in branches:
            raise Unsupported(f"union {branches!r}: only null and one other type")
        null = branches.index("null")
        self._nullable(branches[1 - null], null, var, lines, depth)

    def _var(self) -> str:
        self._vars += 1
        return f"v{self._vars}"

    def _record(self, fn: str, schema: Mapping[str, Any]) -> list[str]:
        """The lines of the function ``fn`` of records of ``schema``."""
        raise NotImplementedError

    def _complex(self, schema: Mapping[str, Any], var: str, lines: list[str],
                 depth: int) -> None:
        """What a record, array or map in ``var`` compiles to."""
        raise NotImplementedError

    def _primitive(self, kind: str, var: str) -> list[str]:
        """The lines (not indented) of a primitive of ``kind`` in ``var``."""
        raise NotImplementedError

    def _nullable(self, other: Any, null: int, var: str, lines: list[str],
                  depth: int) -> None:
        """What a union of null (branch ``null``) and ``other`` in ``var`` compiles to."""
        raise NotImplementedError


def compile_record(schema: Mapping[str, Any], compiler: Callable[[Mapping[str, Any]],
                   SchemaCompiler], env: Mapping[str, Any]) -> Any:
    """The function of a record schema parsed by fastavro (its ``__named_schemas`` resolve
    references) that ``compiler`` makes, run with ``env`` and the compiler's constants
    in its namespace. Raises :class:`Unsupported` for a schema it does not cover."""
    if not isinstance(schema, Mapping) or schema.get("type") != "record":
        raise Unsupported("not a record schema")
    source = compiler(schema.get("__named_schemas") or {})
    top = source.record(schema)
    namespace = {**env, **source.constants}
    exec("\n\n".join(source.sources), namespace)  # noqa: S102 - source made above
    return namespace[top]
