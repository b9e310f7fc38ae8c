"""Reading a Slurm ``--json`` document from a file without holding it: its list of
objects (``jobs`` of squeue and sacct, ``nodes`` of scontrol and sinfo) one object at a
time, and the other top-level keys beside it.

50,000 queued jobs are ~28 MiB of JSON and ~5x that as Python objects, against an edge's
budget of 50 MB resident; a large cluster's node list is the same order. A first streaming
pass (``ijson``) validates the document and keeps its top-level keys other than the list,
wherever they are (22.05 prints ``meta`` first, newer releases after the list); a second
pass reads the list's objects one by one.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from typing import IO, Any

import ijson

from pipeline.edges.slurm.polling import PollError

__all__ = ["iter_items", "top_level"]


class _Utf8Replaced:
    """``f`` from its start, as UTF-8 with invalid bytes replaced by U+FFFD (as the decode
    of the whole output did): Slurm prints job names and comments byte for byte, and yajl
    rejects a whole document for one invalid byte."""

    def __init__(self, f: IO[bytes]) -> None:
        f.seek(0)
        self._f = f
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def read(self, size: int = -1) -> bytes:
        data = self._f.read(size)
        # size 0 is ijson probing for bytes vs str, not the end of the file
        return self._decoder.decode(data, final=not data and size != 0).encode()


def _not_json(exc: ijson.JSONError) -> PollError:
    # yajl's messages go on with a picture of the spot over several lines
    first = str(exc).strip().splitlines()
    return PollError(f"output is not JSON: {first[0] if first else type(exc).__name__}")


def _unreadable(exc: Exception) -> PollError:
    """A document yajl reads but Python cannot hold: an integer of more digits than
    ``int()`` takes. yajl2_c's ``basic_parse`` reports it as a SystemError, and its
    ``items`` crashes the process on it, so :func:`top_level`'s pass, which comes first
    and reads every value, must refuse such a document before :func:`iter_items` sees it."""
    return PollError(f"output holds a value Python cannot read: {str(exc)[:200]}")


def top_level(f: IO[bytes], items: str) -> dict[str, Any]:
    """The document's top-level keys other than its list ``items``, in their order, from
    one streaming pass that also checks the whole document (the list's objects are
    skipped, not built)."""
    rest: dict[str, Any] = {}
    key = ""
    builder: ijson.ObjectBuilder | None = None
    depth = 0  # containers open inside the current top-level value
    has_items = False
    # not use_float=True: yajl then reads integers as int64 and rejects a larger one, and
    # Slurm prints uint64 values (e.g. memory with the MEM_PER_CPU bit set); the Decimals
    # ijson gives instead become the same floats as json.loads made in changes.dumps
    events = ijson.basic_parse(_Utf8Replaced(f))
    try:
        first = next(events, None)
        if first is None or first[0] != "start_map":
            raise PollError(f"output has no {items} list")
        for event, value in events:
            if depth == 0:
                if event == "map_key":
                    key = value
                    builder = None if key == items else ijson.ObjectBuilder()
                    continue
                if event == "end_map":  # the document's own end
                    continue
                if key == items:  # the first event of its value
                    has_items = event == "start_array"
            if builder is not None:
                builder.event(event, value)
            if event in ("start_map", "start_array"):
                depth += 1
            elif event in ("end_map", "end_array"):
                depth -= 1
            if depth == 0 and builder is not None:
                rest[key] = builder.value
                builder = None
    except ijson.JSONError as exc:
        raise _not_json(exc) from exc
    except (ValueError, SystemError) as exc:
        raise _unreadable(exc) from exc
    if not has_items:
        raise PollError(f"output has no {items} list")
    return rest


def iter_items(f: IO[bytes], items: str) -> Iterator[dict[str, Any]]:
    """The objects of the list ``items`` of a document :func:`top_level` accepted, one at
    a time."""
    try:
        yield from ijson.items(_Utf8Replaced(f), f"{items}.item")  # Decimals: see top_level
    except ijson.JSONError as exc:
        raise _not_json(exc) from exc
    except (ValueError, SystemError) as exc:
        raise _unreadable(exc) from exc
