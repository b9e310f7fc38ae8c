"""The Avro schemas of jobstream's topics, loaded and parsed once.

The ``.avsc`` files live in the repository's ``schemas/`` directory; the package reaches
them through ``pipeline/_schemas`` (a symlink in the source tree, a real directory in a
wheel, where setuptools copies the files as package data).

Every schema has its current version, ``schemas/<Name>.avsc``, and the versions data was
ever written with, ``schemas/history/<Name>.v<N>.avsc``. A reader must resolve all of
them (replay reads the oldest retained data with the newest reader), so history files are
never edited or removed; the newest history version is always the current schema.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from pipeline import PACKAGE_DIR
from pipeline.runtime.errors import JobstreamError

__all__ = [
    "FINGERPRINTS_FILE",
    "SCHEMA_NAMES",
    "SchemaVersions",
    "fingerprint",
    "fingerprints",
    "load_schema",
    "schema_dir",
]

#: Every schema jobstream publishes, one per topic (docs/design.md, section 2); NodeState is
#: the node documents' (pipeline.fold.nodes), NodeEvent the node events' (issue 36).
SCHEMA_NAMES: tuple[str, ...] = ("RawRecord", "JobEvent", "JobState", "QueueSnapshot",
                                 "NodeState", "NodeEvent")

#: beside the schema files: every current schema's fingerprint (hex), for the writers that
#: do without fastavro (:mod:`pipeline.codecs.single_object`); :func:`fingerprints` makes it
FINGERPRINTS_FILE = "fingerprints.json"

_HISTORY_FILE = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)\.v(?P<version>[1-9][0-9]*)\.avsc$")


def schema_dir() -> Path:
    """The directory holding the ``.avsc`` files of the installed package."""
    return PACKAGE_DIR / "_schemas"


def fingerprint(parsed: Mapping[str, Any] | str) -> bytes:
    """The CRC-64-AVRO fingerprint of a parsed schema's parsing canonical form, as the 8
    little-endian bytes Avro single-object encoding puts after ``C3 01``."""
    # imported here, as in _parse: a process that only writes single-object records
    # (the node daemon) reads the fingerprint from FINGERPRINTS_FILE, without fastavro
    from fastavro.schema import fingerprint as fastavro_fingerprint
    from fastavro.schema import to_parsing_canonical_form

    # fastavro's hex digest is already the little-endian byte string.
    return bytes.fromhex(fastavro_fingerprint(to_parsing_canonical_form(parsed), "CRC-64-AVRO"))


def fingerprints(directory: Path | None = None) -> str:
    """The text of :data:`FINGERPRINTS_FILE`: the fingerprint of the current version of
    every schema of :data:`SCHEMA_NAMES`, computed by fastavro.
    ``python -m pipeline.codecs.schemas > schemas/fingerprints.json`` writes it."""
    return json.dumps({name: fingerprint(load_schema(name, directory).current).hex()
                       for name in SCHEMA_NAMES}, indent=2) + "\n"


@dataclass(frozen=True)
class SchemaVersions:
    """One schema: its current parsed form and every version data may have been written with."""

    name: str
    #: the current schema, parsed by fastavro (the reader schema)
    current: Mapping[str, Any]
    #: the current schema as compact JSON text, docs included (what a registry gets)
    text: str
    #: version number -> parsed schema, from ``history/<name>.v<N>.avsc``
    history: Mapping[int, Mapping[str, Any]]

    @property
    def fingerprint(self) -> bytes:
        return fingerprint(self.current)

    @property
    def field_names(self) -> frozenset[str]:
        return frozenset(f["name"] for f in self.current["fields"])


def load_schema(name: str, directory: Path | None = None) -> SchemaVersions:
    """Load schema ``name`` (and its history) from ``directory`` (default: the package's).

    Results for the package's own directory are cached: parsing happens once per process.
    """
    if directory is None:
        return _load_default(name)
    return _load(name, Path(directory))


@cache
def _load_default(name: str) -> SchemaVersions:
    return _load(name, schema_dir())


def _load(name: str, directory: Path) -> SchemaVersions:
    raw = _read(directory / f"{name}.avsc")
    current = _parse(raw, directory / f"{name}.avsc")
    history: dict[int, Mapping[str, Any]] = {}
    hist_dir = directory / "history"
    if hist_dir.is_dir():
        for path in sorted(hist_dir.iterdir()):
            m = _HISTORY_FILE.match(path.name)
            if m and m["name"] == name:
                history[int(m["version"])] = _parse(_read(path), path)
    return SchemaVersions(
        name=name,
        current=current,
        text=json.dumps(raw, separators=(",", ":")),
        history=dict(sorted(history.items())),
    )


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise JobstreamError(f"Avro schema {path} cannot be read: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise JobstreamError(f"Avro schema {path} is not valid JSON: {exc}") from exc


def _parse(raw: Any, path: Path) -> Mapping[str, Any]:
    from fastavro.schema import parse_schema

    try:
        parsed = parse_schema(raw)
    except Exception as exc:  # fastavro raises several types for a bad schema
        raise JobstreamError(f"Avro schema {path} is invalid: {exc}") from exc
    if not isinstance(parsed, dict) or parsed.get("type") != "record":
        raise JobstreamError(f"Avro schema {path} must be a record schema")
    return parsed


if __name__ == "__main__":
    print(fingerprints(), end="")
