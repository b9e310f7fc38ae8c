"""Records -> Elasticsearch bulk actions (pure).

* A job document (JobState) is a full-document ``index`` into the month of its
  ``t_submit``, ``_id`` from :func:`job_doc_id`, ``version_type=external`` with the job's
  ``revision``: Elasticsearch keeps only the highest revision, whatever order or how many
  times the states arrive (a conflict means "already applied").
* A canonical event is a ``create`` with ``_id = event_id`` into the month of its time: a
  duplicate is refused by Elasticsearch and counts as already written.
* A node event (NodeEvent) is a ``create`` with ``_id = event_id`` into the month of its
  ``timestamp`` (epoch milliseconds), as a job event: its copies are one document. Its
  ``context`` is indexed as ``flattened``, checked as a job event's.
* A queue snapshot is an ``index`` with an id made of what identifies it (cluster, queue,
  worker, time, and the reason of a reason snapshot, the node state and reason of a node
  row), so a redelivery rewrites the same document.
* A node document (NodeState) is a full-document ``index`` into its generation's one
  ``current`` index, ``_id`` from :func:`node_doc_id` (``cluster:node``), external version
  the node's ``revision``, as a job's. A node tombstone (a key without a value) deletes its
  document, id from the key: the topic's key is ``cluster:node`` as the id is, and the
  tombstone has nothing else; it carries no version (it has no revision), and a
  compacted topic keeps one key's records in one partition in order, so it deletes what
  came before it and nothing after. A node that comes back after its tombstone must come
  back with a higher revision than it had: Elasticsearch keeps a deleted document's
  version for ``index.gc_deletes`` (60 s) and refuses lower external versions meanwhile.

Every ``_id`` is at most :data:`MAX_ID_BYTES` (Elasticsearch's 512 bytes of UTF-8) by
construction (:func:`bounded_id`): one id over it makes Elasticsearch refuse the *whole*
bulk request, and job and snapshot ids hold names (cluster, queue) anyone may make long.
An id that fits is kept as it always was, so documents already written keep theirs; a
longer one becomes its longest prefix that leaves room, ``#``, and a 128-bit hash of the
whole id. Event ids are the parsers' hashes, but a foreign producer's can be anything, so
they go through the same function.

Every time a document is filed under must lie in 1970..9999 (see
:mod:`pipeline.sink.names`); any other is the record's ``bad_time``, never an invented
index or an exception out of the converter.

An event's ``context`` and ``facts`` are indexed as ``flattened``, which refuses a whole
document for a key holding NUL, nesting deeper than 20 objects or a key path too long for
a term: such an event is ``bad_json`` here, with the reason, rather than a refusal of the
bulk item.

:func:`coalesce` keeps one action per document within a flush (a job's highest revision),
which is what keeps Elasticsearch writes per job far below events per job.

A record that cannot become a document raises :class:`DocumentError` with a short reason
word; the runner sends it to the DLQ.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pipeline.core.model import EVENT_JSON_FIELDS
from pipeline.fold import doc_id as fold_doc_id
from pipeline.fold.nodes import node_doc_id as fold_node_doc_id
from pipeline.fold.usage import USAGE_EVENT, series_point
from pipeline.parsers.surrogates import check_surrogates
from pipeline.runtime.errors import ParseError, Refusal, SinkError
from pipeline.sink.names import (
    CURRENT,
    MAX_TIME_MS,
    MIN_TIME_MS,
    UNDATED,
    Family,
    TimeRangeError,
    check_generation,
    check_prefix,
    index_name,
    month_of,
)

__all__ = [
    "MAX_ID_BYTES",
    "Action",
    "Converter",
    "DocumentError",
    "Op",
    "bounded_id",
    "coalesce",
    "job_doc_id",
    "node_doc_id",
]

#: Elasticsearch's limit of a document's ``_id``, in bytes of UTF-8.
MAX_ID_BYTES = 512
#: hex digits of the hash that ends an id too long to keep (blake2b, 128 bits: a collision
#: among the long ids of one index is not a thing that happens)
_ID_HASH_HEX = 32
#: the readable prefix of a hashed id, at most: what is left beside ``#`` and the hash
_ID_HEAD_BYTES = MAX_ID_BYTES - 1 - _ID_HASH_HEX
#: an id of at most this many characters fits whatever they are (4 bytes each at most)
_ID_SURELY_FITS = MAX_ID_BYTES // 4

#: JSON-text fields of a JobEvent (Avro has no arbitrary-JSON type); each must hold an
#: object (context and facts are indexed as ``flattened``, the rest kept in _source).
_EVENT_JSON_FIELDS: tuple[str, ...] = EVENT_JSON_FIELDS
_FLATTENED: frozenset[str] = frozenset({"context", "facts"})

#: What Elasticsearch's ``flattened`` fields refuse of an object (the whole document with
#: it): a key holding NUL (its separator of key and value), more levels than its
#: ``depth_limit`` (20), and a dotted key path so long that ``path NUL value`` is over
#: Lucene's 32766-byte term limit even with the value within ``ignore_above`` (1024
#: characters, 4 bytes each at most). Checked here, so the event is the DLQ's with a
#: reason that says which key, before the bulk request.
_FLATTENED_DEPTH = 20
_FLATTENED_PATH_BYTES = 32766 - 1 - 4 * 1024


class DocumentError(Refusal, SinkError):
    """A record cannot become a document; ``reason`` is the DLQ reason word."""


class Op(StrEnum):
    INDEX = "index"
    CREATE = "create"
    DELETE = "delete"


@dataclass(frozen=True, slots=True)
class Action:
    """One bulk operation. ``origin`` says where the record came from (opaque here: the
    runner's Kafka coordinates); it does not take part in equality."""

    family: Family
    op: Op
    index: str
    doc_id: str
    source: Mapping[str, Any] | None = None
    #: external version (job or node revision); None = no version check
    version: int | None = None
    origin: Any = field(default=None, compare=False)

    def header(self) -> dict[str, Any]:
        meta: dict[str, Any] = {"_index": self.index, "_id": self.doc_id}
        if self.version is not None:
            meta["version"] = self.version
            meta["version_type"] = "external"
        return {self.op.value: meta}

    def operations(self) -> list[Mapping[str, Any]]:
        """The NDJSON lines of this action for ``_bulk``."""
        if self.op is Op.DELETE or self.source is None:
            return [self.header()]
        return [self.header(), self.source]

    @property
    def key(self) -> tuple[Family, str]:
        return (self.family, self.doc_id)


def bounded_id(text: str) -> str:
    """``text`` if it is at most :data:`MAX_ID_BYTES` of UTF-8, else its longest prefix
    that leaves room (cut between characters), ``#`` and the hash of all of it.

    Deterministic, so a redelivered record finds its document. An id that fits is never
    changed (documents written before keep their ids); a hashed one is exactly as unique
    as the full text, and still starts with what it is about.
    """
    if len(text) <= _ID_SURELY_FITS:
        return text
    data = text.encode("utf-8", "surrogatepass")  # a lone surrogate fails later, per item
    if len(data) <= MAX_ID_BYTES:
        return text
    head = data[:_ID_HEAD_BYTES].decode("utf-8", "ignore")  # drops a cut character
    return f"{head}#{hashlib.blake2b(data, digest_size=_ID_HASH_HEX // 2).hexdigest()}"


def job_doc_id(doc: Mapping[str, Any]) -> str:
    """The ``_id`` of a job document: the fold's identity of a job incarnation
    (``cluster:job_id[@t_submit]``), bounded by :func:`bounded_id`.

    Whatever looks a job document up by ``_id`` must use this, not
    :func:`pipeline.fold.doc_id`: they differ for names of hundreds of characters.
    """
    return bounded_id(fold_doc_id(doc))


def node_doc_id(doc: Mapping[str, Any]) -> str:
    """The ``_id`` of a node document: the fold's ``cluster:node``
    (:func:`pipeline.fold.nodes.node_doc_id`, the topic's key too), bounded by
    :func:`bounded_id` (cluster and host names are anyone's to make long)."""
    return bounded_id(fold_node_doc_id(doc))


@dataclass(frozen=True)
class Converter:
    """Builds actions for one index prefix and generation."""

    prefix: str = ""
    generation: str = "v1"

    def __post_init__(self) -> None:
        check_generation(self.generation)
        check_prefix(self.prefix)

    def convert(self, family: Family, record: Mapping[str, Any], origin: Any = None) -> Action:
        if family is Family.JOBS:
            return self.job(record, origin)
        if family is Family.EVENTS:
            return self.event(record, origin)
        if family is Family.NODES:
            return self.node(record, origin)
        if family is Family.NODE_EVENTS:
            return self.node_event(record, origin)
        return self.snapshot(record, origin)

    def undated_index(self) -> str:
        return index_name(self.prefix, Family.JOBS, self.generation, UNDATED)

    def nodes_index(self) -> str:
        return index_name(self.prefix, Family.NODES, self.generation, CURRENT)

    def job(self, doc: Mapping[str, Any], origin: Any = None) -> Action:
        _require_str(doc, "cluster", "job_id")
        revision = _revision("job", doc)
        t_submit = doc.get("t_submit")
        if t_submit is None:
            month = UNDATED
        elif isinstance(t_submit, int) and not isinstance(t_submit, bool):
            month = _month("t_submit", t_submit)
        else:
            raise DocumentError("bad_time", f"t_submit must be epoch milliseconds, "
                                            f"got {t_submit!r}")
        return Action(
            family=Family.JOBS, op=Op.INDEX,
            index=index_name(self.prefix, Family.JOBS, self.generation, month),
            doc_id=job_doc_id(doc), source=_without_nulls(doc), version=revision,
            origin=origin,
        )

    def event(self, event: Mapping[str, Any], origin: Any = None) -> Action:
        _require_str(event, "cluster", "job_id", "event_id")
        ts = event.get("timestamp")
        if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts):
            raise DocumentError("bad_time", f"event timestamp must be epoch seconds, got {ts!r}")
        if not _MIN_TIME_S <= ts <= _MAX_TIME_S:  # before * 1000, which could overflow
            raise DocumentError("bad_time", f"event timestamp {ts!r} s is outside "
                                            "1970-01-01..9999-12-31")
        epoch_ms = round(ts * 1000)
        month = _month("event timestamp", epoch_ms)
        source = _without_nulls(event)
        for name in _EVENT_JSON_FIELDS:
            if name in source:
                source[name] = _json_object(name, source[name])
        source["@timestamp"] = epoch_ms
        if source.get("event") == USAGE_EVENT and isinstance(source.get("context"), dict):
            # typed, so that the job page can average and chart it (context is keywords)
            source["usage"] = series_point(source["context"])
        return Action(
            family=Family.EVENTS, op=Op.CREATE,
            index=index_name(self.prefix, Family.EVENTS, self.generation, month),
            doc_id=bounded_id(str(event["event_id"])), source=source, origin=origin,
        )

    def node(self, doc: Mapping[str, Any], origin: Any = None) -> Action:
        _require_str(doc, "cluster", "node")
        return Action(
            family=Family.NODES, op=Op.INDEX, index=self.nodes_index(),
            doc_id=node_doc_id(doc), source=_without_nulls(doc),
            version=_revision("node", doc), origin=origin,
        )

    def node_event(self, event: Mapping[str, Any], origin: Any = None) -> Action:
        _require_str(event, "cluster", "node", "event_id")
        ts = event.get("timestamp")
        if isinstance(ts, bool) or not isinstance(ts, int):
            raise DocumentError("bad_time", f"node event timestamp must be epoch "
                                            f"milliseconds, got {ts!r}")
        month = _month("node event timestamp", ts)
        source = _without_nulls(event)
        source["context"] = _json_object("context", source.get("context", "{}"))
        return Action(
            family=Family.NODE_EVENTS, op=Op.CREATE,
            index=index_name(self.prefix, Family.NODE_EVENTS, self.generation, month),
            doc_id=bounded_id(str(event["event_id"])), source=source, origin=origin,
        )

    def node_gone(self, key: bytes | str | None, origin: Any = None) -> Action:
        """The delete of a node tombstone's document (module docstring)."""
        if isinstance(key, bytes):
            try:
                key = key.decode("utf-8")
            except UnicodeDecodeError:
                raise DocumentError("bad_key", "node tombstone key is not UTF-8") from None
        if not key:
            raise DocumentError("missing_field", "node tombstone has no key")
        return Action(family=Family.NODES, op=Op.DELETE, index=self.nodes_index(),
                      doc_id=bounded_id(key), origin=origin)

    def snapshot(self, snap: Mapping[str, Any], origin: Any = None) -> Action:
        _require_str(snap, "cluster", "worker")
        queue = snap.get("queue")
        ts = snap.get("timestamp")
        if not isinstance(queue, str):
            raise DocumentError("missing_field", "queue snapshot has no queue")
        if isinstance(ts, bool) or not isinstance(ts, int):
            raise DocumentError("bad_time", f"snapshot timestamp must be epoch milliseconds, "
                                            f"got {ts!r}")
        return Action(
            family=Family.SNAPSHOTS, op=Op.INDEX,
            index=index_name(self.prefix, Family.SNAPSHOTS, self.generation,
                             _month("snapshot timestamp", ts)),
            doc_id=bounded_id(_snapshot_id(snap, queue, ts)),
            source=_without_nulls(snap), origin=origin,
        )

    def relocations(self, actions: Iterable[Action], undated: Iterable[str]) -> list[Action]:
        """Deletes of the undated copies of jobs now written to their month.

        ``undated``: the ids present in the undated index. The delete carries the new
        revision as external version, so it can only remove an older copy, never a newer
        one, and its tombstone refuses a late redelivery of the older copy.
        """
        present = set(undated)
        target = self.undated_index()
        return [
            Action(family=Family.JOBS, op=Op.DELETE, index=target, doc_id=a.doc_id,
                   version=a.version, origin=a.origin)
            for a in actions
            if a.family is Family.JOBS and a.op is Op.INDEX and a.index != target
            and a.doc_id in present
        ]


_MIN_TIME_S = MIN_TIME_MS / 1000
_MAX_TIME_S = (MAX_TIME_MS + 1) / 1000


def _revision(what: str, doc: Mapping[str, Any]) -> int:
    revision = doc.get("revision")
    if isinstance(revision, bool) or not isinstance(revision, int) or revision < 0:
        raise DocumentError("bad_revision",
                            f"{what} document revision must be a non-negative integer, "
                            f"got {revision!r}")
    return revision


def _month(what: str, epoch_ms: int) -> str:
    try:
        return month_of(epoch_ms)
    except TimeRangeError as exc:
        raise DocumentError("bad_time", f"{what}: {exc}") from None


def _snapshot_id(snap: Mapping[str, Any], queue: str, ts: int) -> str:
    """A queue's snapshot keeps its id of before reason snapshots; a reason snapshot of the
    same worker and instant adds its reason; a node row (empty queue, which no queue's
    snapshot has) its node state, and its node reason when it has one (states are one
    word, so a reason cannot make the id of another state's row)."""
    base = f"{snap['cluster']}:{queue}:{snap['worker']}:{ts}"
    state = snap.get("node_state")
    if state is not None:
        reason = snap.get("node_reason")
        return f"{base}:{state}" if reason is None else f"{base}:{state}:{reason}"
    reason = snap.get("reason")
    return base if reason is None else f"{base}:{reason}"


def coalesce(actions: Sequence[Action]) -> tuple[list[Action], list[Action]]:
    """One action per document: ``(kept, superseded)``, kept in first-seen order.

    Jobs and nodes keep the highest revision (the first one of equal revisions, as
    Elasticsearch would: external versions must grow); a node's delete (its tombstone)
    and whatever follows a delete replace what came before, in the order of the key's
    partition; events keep the first (``create``); snapshots keep the last (``index``
    overwrites).
    """
    kept: dict[tuple[Family, str], Action] = {}
    superseded: list[Action] = []
    for action in actions:
        old = kept.get(action.key)
        if old is None:
            kept[action.key] = action
            continue
        if action.family is Family.SNAPSHOTS or _newer(action, old):
            kept[action.key] = action
            superseded.append(old)
        else:
            superseded.append(action)
    return list(kept.values()), superseded


def _newer(action: Action, old: Action) -> bool:
    """Whether ``action`` replaces ``old``, a job's or node's earlier one in the flush."""
    if action.family is Family.NODES and Op.DELETE in (action.op, old.op):
        return True
    return action.family in (Family.JOBS, Family.NODES) and (
        (action.version or 0) > (old.version or 0))


def _require_str(record: Mapping[str, Any], *names: str) -> None:
    for name in names:
        value = record.get(name)
        if not isinstance(value, str) or not value:
            raise DocumentError("missing_field", f"record has no {name}")


def _without_nulls(record: Mapping[str, Any]) -> dict[str, Any]:
    # A null field and an absent one index the same; leaving them out keeps _source small.
    return {k: v for k, v in record.items() if v is not None}


def _json_object(name: str, value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            if "\\u" in value:  # it reads, but a request body cannot hold it
                check_surrogates(value, False, f"event field {name}")
            value = json.loads(value)
        except ParseError as exc:
            raise DocumentError("bad_json", exc.message) from exc
        except json.JSONDecodeError as exc:
            raise DocumentError("bad_json", f"event field {name} is not JSON: {exc}") from exc
        except RecursionError:
            raise DocumentError("bad_json", f"event field {name} nests too deep") from None
    if not isinstance(value, dict):
        raise DocumentError("bad_json", f"event field {name} must be a JSON object, "
                                        f"got {type(value).__name__}")
    if name in _FLATTENED:
        _check_flattened(name, value)
    return value


def _check_flattened(name: str, obj: dict[str, Any]) -> None:
    """DocumentError if a ``flattened`` field would refuse ``obj`` (see _FLATTENED_DEPTH)."""
    stack: list[tuple[Any, int, int]] = [(obj, 1, 0)]  # (value, depth, path bytes so far)
    while stack:
        value, depth, path = stack.pop()
        if isinstance(value, list):
            stack.extend((v, depth, path) for v in value)
            continue
        if not isinstance(value, dict):
            continue
        if depth > _FLATTENED_DEPTH:
            raise DocumentError("bad_json", f"event field {name} nests deeper than "
                                            f"{_FLATTENED_DEPTH} objects")
        for key, inner in value.items():
            key = str(key)
            if "\x00" in key:
                raise DocumentError("bad_json", f"event field {name} has a key holding NUL "
                                                f"({key[:80]!r}), which no index can hold")
            # the dotted path, in bytes of UTF-8 (an ASCII key's length is its size)
            length = path + (1 if path else 0) + (
                len(key) if key.isascii() else len(key.encode("utf-8", "surrogatepass")))
            if length > _FLATTENED_PATH_BYTES:
                raise DocumentError("bad_json", f"event field {name} has a key path of "
                                                f"{length} bytes, over the "
                                                f"{_FLATTENED_PATH_BYTES} an index can hold")
            if isinstance(inner, dict | list):  # a list's objects are one level down too
                stack.append((inner, depth + 1, length))
