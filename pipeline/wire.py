"""What the agents put on and take off Kafka.

Public topics carry Avro (:mod:`pipeline.codec`); the workers' internal canonical topic
carries compact JSON of :meth:`JobEvent.to_dict`, or a control word. JSON there keeps the
internal hop cheap and schema-free: no one outside the worker reads it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from pipeline.codec import AvroCodec, codecs_from_config, raw_from_avro
from pipeline.config import Config
from pipeline.errors import ParseError
from pipeline.model import JobEvent, RawRecord

__all__ = ["EXPIRE", "Wire", "decode_canonical", "encode_canonical", "encode_control"]

#: Control word on the canonical topic: drop this key's state if the job is done.
EXPIRE: Final = "expire"

_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def encode_canonical(ev: JobEvent) -> bytes:
    return _dumps(ev.to_dict()).encode()


def encode_control(word: str) -> bytes:
    return _dumps({"control": word}).encode()


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
        for name in ("context", "facts"):
            d[name] = _dumps(d.get(name) or {})
        for name in ("jobspec", "R", "record"):
            d[name] = None if d.get(name) is None else _dumps(d[name])
        return self.codecs["events"].encode(d)

    def encode_state(self, doc: Mapping[str, Any]) -> bytes:
        return self.codecs["state"].encode(doc)

    def encode_snapshot(self, snap: Mapping[str, Any]) -> bytes:
        return self.codecs["snapshots"].encode(snap)
