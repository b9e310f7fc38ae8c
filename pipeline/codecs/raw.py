"""The RawRecord model <-> the dicts the codecs write and read for ``hpc.jobs.raw``.

Apart from :mod:`pipeline.codecs.codec` so that an edge that only writes (the node
daemon, :class:`~pipeline.codecs.single_object.SingleObjectWriter`) does not import
fastavro for two dict conversions; the codec re-exports both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.core.model import RawRecord

__all__ = ["raw_from_avro", "raw_to_avro"]


def raw_to_avro(rec: RawRecord) -> dict[str, Any]:
    """A :class:`RawRecord` -> the dict ``AvroCodec("RawRecord").encode`` takes."""
    return {
        "cluster": rec.cluster,
        "scheduler": rec.scheduler,
        "format": rec.format,
        "received_at": rec.received_at,
        "payload": rec.payload,
        "key": rec.key,
    }


def raw_from_avro(d: Mapping[str, Any]) -> RawRecord:
    """A decoded ``RawRecord`` dict -> :class:`RawRecord`."""
    return RawRecord(
        cluster=d["cluster"],
        scheduler=d["scheduler"],
        format=d["format"],
        received_at=d["received_at"],
        payload=d["payload"],
        key=d.get("key"),
    )
