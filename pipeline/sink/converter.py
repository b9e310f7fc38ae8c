"""Records -> Elasticsearch bulk actions (pure).

* A job document (JobState) is a full-document ``index`` into the month of its
  ``t_submit``, ``_id`` from :func:`job_doc_id`, ``version_type=external`` with the job's
  ``revision``: Elasticsearch keeps only the highest revision, whatever order or how many
  times the states arrive (a conflict means "already applied").
* A canonical event is a ``create`` with ``_id = event_id`` into the month of its time: a
  duplicate is refused by Elasticsearch and counts as already written.
* A queue snapshot is an ``index`` with an id made of what identifies it (cluster, queue,
  worker, time, and the reason of a reason snapshot), so a redelivery rewrites the same
  document.

:func:`coalesce` keeps one action per document within a flush (a job's highest revision),
which is what keeps Elasticsearch writes per job far below events per job.

A record that cannot become a document raises :class:`DocumentError` with a short reason
word; the runner sends it to the DLQ.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pipeline.errors import ParseError, SinkError
from pipeline.fold import doc_id as fold_doc_id
from pipeline.parsers.surrogates import check_surrogates
from pipeline.sink.names import UNDATED, Family, check_generation, index_name, month_of

__all__ = [
    "Action",
    "Converter",
    "DocumentError",
    "Op",
    "coalesce",
    "job_doc_id",
]

#: JSON-text fields of a JobEvent (Avro has no arbitrary-JSON type); each must hold an
#: object (context and facts are indexed as ``flattened``, the rest kept in _source).
_EVENT_JSON_FIELDS: tuple[str, ...] = ("context", "facts", "jobspec", "R", "record")


class DocumentError(SinkError):
    """A record cannot become a document; ``reason`` is the DLQ reason word."""

    exit_code = 65

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


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
    #: external version (job revision); None = no version check
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


def job_doc_id(doc: Mapping[str, Any]) -> str:
    """The ``_id`` of a job document: the fold's identity of a job incarnation."""
    return fold_doc_id(doc)


@dataclass(frozen=True)
class Converter:
    """Builds actions for one index prefix and generation."""

    prefix: str = ""
    generation: str = "v1"

    def __post_init__(self) -> None:
        check_generation(self.generation)

    def convert(self, family: Family, record: Mapping[str, Any], origin: Any = None) -> Action:
        if family is Family.JOBS:
            return self.job(record, origin)
        if family is Family.EVENTS:
            return self.event(record, origin)
        return self.snapshot(record, origin)

    def undated_index(self) -> str:
        return index_name(self.prefix, Family.JOBS, self.generation, UNDATED)

    def job(self, doc: Mapping[str, Any], origin: Any = None) -> Action:
        _require_str(doc, "cluster", "job_id")
        revision = doc.get("revision")
        if isinstance(revision, bool) or not isinstance(revision, int) or revision < 0:
            raise DocumentError("bad_revision",
                                f"job document revision must be a non-negative integer, "
                                f"got {revision!r}")
        t_submit = doc.get("t_submit")
        if t_submit is None:
            month = UNDATED
        elif isinstance(t_submit, int) and not isinstance(t_submit, bool):
            month = month_of(t_submit)
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
        source = _without_nulls(event)
        for name in _EVENT_JSON_FIELDS:
            if name in source:
                source[name] = _json_object(name, source[name])
        epoch_ms = round(ts * 1000)
        source["@timestamp"] = epoch_ms
        return Action(
            family=Family.EVENTS, op=Op.CREATE,
            index=index_name(self.prefix, Family.EVENTS, self.generation, month_of(epoch_ms)),
            doc_id=str(event["event_id"]), source=source, origin=origin,
        )

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
            index=index_name(self.prefix, Family.SNAPSHOTS, self.generation, month_of(ts)),
            doc_id=_snapshot_id(snap, queue, ts),
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


def _snapshot_id(snap: Mapping[str, Any], queue: str, ts: int) -> str:
    """A queue's snapshot keeps its id of before reason snapshots; a reason snapshot of the
    same worker and instant adds its reason."""
    base = f"{snap['cluster']}:{queue}:{snap['worker']}:{ts}"
    reason = snap.get("reason")
    return base if reason is None else f"{base}:{reason}"


def coalesce(actions: Sequence[Action]) -> tuple[list[Action], list[Action]]:
    """One action per document: ``(kept, superseded)``, kept in first-seen order.

    Jobs keep the highest revision (the first one of equal revisions, as Elasticsearch
    would: external versions must grow); events keep the first (``create``); snapshots keep
    the last (``index`` overwrites).
    """
    kept: dict[tuple[Family, str], Action] = {}
    superseded: list[Action] = []
    for action in actions:
        old = kept.get(action.key)
        if old is None:
            kept[action.key] = action
            continue
        if action.family is Family.SNAPSHOTS or (
                action.family is Family.JOBS and (action.version or 0) > (old.version or 0)):
            kept[action.key] = action
            superseded.append(old)
        else:
            superseded.append(action)
    return list(kept.values()), superseded


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
    if not isinstance(value, dict):
        raise DocumentError("bad_json", f"event field {name} must be a JSON object, "
                                        f"got {type(value).__name__}")
    return value
