"""What the agents put on and take off Kafka.

Public topics carry Avro (:mod:`pipeline.codecs.codec`); the workers' internal canonical topic
carries compact JSON of :meth:`JobEvent.to_dict`, or a control word. JSON there keeps the
internal hop cheap and schema-free: no one outside the worker reads it.

Size. An event travels as one Kafka message on the canonical and the events topics, which
keep the broker's default size limit (1 MiB): a raw record may be far bigger (a Flux
jobspec with a large ``attributes.user`` blob). :func:`fit_event` keeps every event under
``worker.max_event_bytes`` by dropping its free-form payloads, biggest first, each marked
in the event's context; the fold never reads them (the facts carry what a job document
needs), so the job state is the same either way.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Final

from pipeline.codecs.codec import AvroCodec, codecs_from_config, raw_from_avro
from pipeline.core.jsontext import dumps, dumps_text
from pipeline.core.model import EVENT_OBJECTS, EVENT_PAYLOADS, JobEvent, RawRecord
from pipeline.runtime.config import Config
from pipeline.runtime.errors import ParseError

__all__ = ["EXPIRE", "Wire", "decode_canonical", "encode_canonical", "encode_control",
           "fit_event"]

#: Control word on the canonical topic: drop this key's state if the job is done.
EXPIRE: Final = "expire"

def encode_canonical(ev: JobEvent) -> bytes:
    return dumps(ev.to_dict())


#: Free-form payloads an event may lose to fit a message (the fold reads none of them).
DROPPABLE: Final = EVENT_PAYLOADS


def fit_event(ev: JobEvent, max_bytes: int) -> tuple[JobEvent, bytes]:
    """``ev`` and its canonical encoding, at most ``max_bytes`` long.

    A bigger event loses its biggest payloads (:data:`DROPPABLE`) until it fits, each one
    dropped marked ``<name>_truncated: true`` in its context; ParseError ``too-large`` if
    it does not fit even without them.
    """
    data = encode_canonical(ev)
    if len(data) <= max_bytes:
        return ev, data
    names = sorted((n for n in DROPPABLE if getattr(ev, n) is not None),
                   key=lambda n: len(dumps(getattr(ev, n))), reverse=True)
    dropped: list[str] = []
    for name in names:
        dropped.append(name)
        fitted = replace(ev, context={**ev.context, **{f"{n}_truncated": True for n in dropped}},
                         **dict.fromkeys(dropped))
        data = encode_canonical(fitted)
        if len(data) <= max_bytes:
            return fitted, data
    raise ParseError("too-large", f"event {ev.event} of job {ev.key} is over {max_bytes} bytes "
                                  "even without its jobspec, R and record")


def encode_control(word: str) -> bytes:
    return dumps({"control": word})


def decode_canonical(data: bytes) -> JobEvent | str:
    d = json.loads(data)
    if "control" in d:
        return str(d["control"])
    return JobEvent.from_dict(d)


class Wire:
    """The Avro codecs of the public topics, built once per process from the config."""

    def __init__(self, cfg: Config, codecs: Mapping[str, AvroCodec] | None = None) -> None:
        self.codecs = dict(codecs) if codecs is not None else codecs_from_config(cfg)

    def decode_raw(self, data: bytes) -> RawRecord:
        """Raw-topic bytes -> RawRecord; ParseError (``bad-avro``, ``unknown-schema``) if not."""
        if not data:
            raise ParseError("empty", "the raw record has no value")
        return raw_from_avro(self.codecs["raw"].decode(data))

    def encode_event(self, event: Mapping[str, Any]) -> bytes:
        """An event dict (``JobEvent.to_dict`` shape, after anonymization) -> Avro bytes."""
        d = dict(event)
        for name in EVENT_OBJECTS:
            d[name] = dumps_text(d.get(name) or {})
        for name in EVENT_PAYLOADS:
            d[name] = None if d.get(name) is None else dumps_text(d[name])
        return self.codecs["events"].encode(d)

    def encode_state(self, doc: Mapping[str, Any]) -> bytes:
        return self.codecs["state"].encode(doc)

    def encode_snapshot(self, snap: Mapping[str, Any]) -> bytes:
        return self.codecs["snapshots"].encode(snap)

    def encode_node_event(self, event: Mapping[str, Any]) -> bytes:
        """A node event document (:func:`pipeline.fold.nodes.event_document`, after
        anonymization) -> Avro bytes of ``NodeEvent``, its context as JSON text."""
        d = dict(event)
        d["context"] = dumps_text(d.get("context") or {})
        return self.codecs["node_events"].encode(d)

    def encode_node_state(self, doc: Mapping[str, Any]) -> bytes:
        """A node document (:mod:`pipeline.fold.nodes`, after anonymization) -> Avro bytes
        of ``NodeState``, framed as the job states are."""
        return self.codecs["nodes"].encode(doc)
