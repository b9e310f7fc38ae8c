"""A job's user annotations: its ``memo`` events folded as flux-core folds them, bounded.

``flux job memo`` (and jobtap plugins: flux-accounting posts a job's fair-share factor so)
posts ``memo`` events, whose context flux-core merges into the job's ``user`` annotations,
which ``flux jobs`` shows as ``user.*`` (job-list's ``memo_update``): an object merges key
by key into the object at its key, any other value replaces what is there, ``null``
removes it, and an object left empty goes. Applied one after another that depends on the
order, and the fold must not; so a job's state keeps, per *path* (the keys from a memo's
context down to one of its values), only what decides the outcome, which is the same
whatever order and copies the memos come in:

* a memo *writes* each of its values at its path: an object (it makes the path an
  object), ``null`` (a tombstone) or any other value. A path's entry keeps its latest
  write, by position (:func:`memo_order`), and ``cut``, the position of its latest write
  that was not an object: a value or a tombstone replaces, so removes, everything below
  the path written before it;
* a value shows when it is its path's latest write and no path above it has a later
  cut. A later write below a path made the path an object: that is a later write at the
  path itself, which the rule already asks for. An object never shows, only the values
  in it, so an empty one shows nothing, as in Flux.

A memo costs its own size: it writes its paths and nothing is read again.

Bounds (:mod:`pipeline.fold`, "Bounds"). At most :data:`USER_ANNOTATION_KEYS` paths are
kept, tombstones and objects included: the smallest in path order, so the kept ones are
the same in any order and a kept path's parents are kept (a path sorts before the paths
below it). A path longer than :data:`USER_ANNOTATION_KEY_BYTES` dotted, or holding NUL
(which no Elasticsearch field takes), is not kept; a value's text is kept to
:data:`USER_ANNOTATION_VALUE_BYTES`. A write (a memo's key, at any depth) not kept whole
is counted in :attr:`UserAnnotations.dropped`, by the fold when it takes the memo as new
(:meth:`pipeline.fold.JobFold.add`): a write at a path not kept (and the writes below
it), every write counted at a path a smaller one pushes out, a value cut; per distinct
(event id, content), as ``revision`` counts, so a memo's backlog and live copies count
twice. Exact when memos arrive in fold order, a lower bound otherwise, as
``events_dropped``.

The document shows them flat (:meth:`UserAnnotations.view`): by dotted path, as
``flux jobs -o '{user.stage}'`` names them, each value as text: a string as it is, any
other value as its compact JSON (``50``, ``true``, ``[1,2]``), which is the keyword
Elasticsearch's ``flattened`` field indexes of it anyway.
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.core.jsontext import canonical
from pipeline.core.model import JobEvent
from pipeline.fold.bounds import (
    USER_ANNOTATION_KEY_BYTES,
    USER_ANNOTATION_KEYS,
    USER_ANNOTATION_VALUE_BYTES,
)

__all__ = ["Position", "UserAnnotations", "memo_order"]

#: A memo's place in fold order: timestamp, seq None last, seq, event id, fingerprint.
Position = tuple[float, bool, int, str, str]
Path = tuple[str, ...]


def memo_order(ev: JobEvent, fp: str) -> Position:
    """Where a memo applies: :func:`~pipeline.fold.order.event_order` (whose event name and
    source rank are the same for every memo), then its fingerprint, so that two memos of
    one id (one timestamp) never tie."""
    return (ev.timestamp, ev.seq is None, ev.seq or 0, ev.event_id, fp)


def _position_json(pos: Position) -> list[Any]:
    ts, no_seq, seq, event_id, fp = pos
    return [ts, None if no_seq else seq, event_id, fp]


def _position(data: list[Any]) -> Position:
    ts, seq, event_id, fp = data
    return (float(ts), seq is None, int(seq or 0), str(event_id), str(fp))


def _text(value: Any) -> tuple[str, bool]:
    """A value as the document shows it, and whether it was cut to fit."""
    text = value if isinstance(value, str) else canonical(value)
    if len(text) * 4 <= USER_ANNOTATION_VALUE_BYTES:
        return text, False
    data = text.encode(errors="surrogatepass")
    if len(data) <= USER_ANNOTATION_VALUE_BYTES:
        return text, False
    return data[:USER_ANNOTATION_VALUE_BYTES].decode(errors="ignore"), True


def _keyable(key: str, dotted: str) -> bool:
    return "\x00" not in key and (len(dotted) * 4 <= USER_ANNOTATION_KEY_BYTES or len(
        dotted.encode(errors="surrogatepass")) <= USER_ANNOTATION_KEY_BYTES)


@dataclass(slots=True)
class _Entry:
    pos: Position  # of the latest write
    value: str | dict[str, Any] | None  # its text; {} an object; None a tombstone
    cut: Position | None  # of the latest write that was not an object
    kept: int  # writes counted here and kept whole: dropped, all, if the path is pushed out


def _writes(value: Any) -> int:
    """The writes of a memo's value: itself and, for an object, every key within."""
    count, todo = 0, [value]
    while todo:
        count += 1
        obj = todo.pop()
        if isinstance(obj, dict):
            todo.extend(obj.values())
    return count


class UserAnnotations:
    """One job's annotation paths, bounded (module docstring)."""

    __slots__ = ("_entries", "_order", "_view", "dropped")

    def __init__(self) -> None:
        self._entries: dict[Path, _Entry] = {}
        self._order: list[Path] = []  # the kept paths, sorted: the largest goes first
        self._view: dict[str, str] | None = None
        #: writes not kept whole, counted by the fold (module docstring)
        self.dropped = 0

    def __len__(self) -> int:
        return len(self._entries)

    def post(self, context: Mapping[str, Any], pos: Position) -> tuple[bool, int]:
        """Write a memo's context at ``pos``: whether anything changed, and how many of its
        writes (a key at any depth) were not kept whole, pushed out ones included (the
        caller counts them if the memo is new). A memo written before changes nothing."""
        changed, dropped = False, 0
        todo: list[tuple[Path, str, Mapping[str, Any]]] = [((), "", context)]
        while todo:  # parents before the paths below them, so they are kept first
            above, prefix, obj = todo.pop()
            for key, value in obj.items():
                path, dotted = (*above, key), f"{prefix}.{key}" if above else key
                cut = False
                if isinstance(value, dict):
                    kept: str | dict[str, Any] | None = {}
                elif value is None:
                    kept = None
                else:
                    kept, cut = _text(value)
                # the paths below one not kept are not either: longer, or sorting after it
                write = self._write(path, pos, kept, cut) if _keyable(key, dotted) else None
                if write is None:
                    dropped += _writes(value)
                    continue
                changed |= write[0]
                dropped += write[1]
                if isinstance(value, dict):
                    todo.append((path, dotted, value))
        if changed:
            self._view = None
        return changed, dropped

    def _write(self, path: Path, pos: Position, value: str | dict[str, Any] | None,
               cut: bool) -> tuple[bool, int] | None:
        """One write, its value cut or not: (changed, writes dropped), None if the path
        has no room."""
        at = None if isinstance(value, dict) else pos
        entry = self._entries.get(path)
        if entry is not None:
            changed = False
            if pos > entry.pos:
                entry.pos, entry.value, changed = pos, value, True
                entry.kept += not cut
            if at is not None and (entry.cut is None or at > entry.cut):
                entry.cut, changed = at, True
            return changed, int(cut)
        out = int(cut)
        if len(self._order) >= USER_ANNOTATION_KEYS:
            if path > self._order[-1]:
                return None
            out += self._entries.pop(self._order.pop()).kept
        self._entries[path] = _Entry(pos, value, at, int(not cut))
        insort(self._order, path)
        return True, out

    def view(self) -> dict[str, str] | None:
        """The annotations as the document shows them (module docstring); None if none."""
        if self._view is None:
            shown: dict[str, tuple[Position, Path, str]] = {}
            entries = self._entries
            for path, e in entries.items():
                if not isinstance(e.value, str) or any(
                        (up := entries.get(path[:i])) is not None and up.cut is not None
                        and up.cut > e.pos for i in range(1, len(path))):
                    continue
                # a key holding a dot and a nested path can name one field: the later wins,
                # and of one memo's two the larger path (never the order entries were made
                # in, which a state read back does not keep)
                name = ".".join(path)
                seen = shown.get(name)
                if seen is None or (e.pos, path) > seen[:2]:
                    shown[name] = (e.pos, path, e.value)
            self._view = {name: text for name, (_, _, text) in sorted(shown.items())}
        return dict(self._view) if self._view else None

    def to_state(self) -> list[list[Any]]:
        """The entries as a job's state keeps them, in path order: ``[path, position,
        value, kept]``, and an object's cut after them (a value's is its position)."""
        out = []
        for path in self._order:
            e = self._entries[path]
            entry = [list(path), _position_json(e.pos), e.value, e.kept]
            if isinstance(e.value, dict):
                entry.append(None if e.cut is None else _position_json(e.cut))
            out.append(entry)
        return out

    @classmethod
    def from_state(cls, entries: Iterable[list[Any]], dropped: int) -> UserAnnotations:
        notes = cls()
        for path, pos, value, kept, *cut in entries:
            at = _position(pos)
            notes._entries[tuple(str(k) for k in path)] = _Entry(
                at, value, (None if cut[0] is None else _position(cut[0])) if cut else at,
                int(kept))
        notes._order = sorted(notes._entries)
        notes.dropped = dropped
        while len(notes._order) > USER_ANNOTATION_KEYS:  # a state kept under a larger bound
            notes.dropped += notes._entries.pop(notes._order.pop()).kept
        return notes
