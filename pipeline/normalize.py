"""The normalize stage: one raw-topic record -> its canonical events (pure)."""

from __future__ import annotations

from pipeline.admission import admit
from pipeline.errors import ParseError
from pipeline.model import JobEvent, RawRecord
from pipeline.parsers import FORMATS, parse_record

__all__ = ["normalize"]


def normalize(raw: RawRecord) -> list[JobEvent]:
    """Canonical events of a raw record; ParseError with the reason if it cannot be parsed
    or the stream must not admit it (:mod:`pipeline.admission`)."""
    if raw.format not in FORMATS:
        raise ParseError("unknown-format", f"raw record of unknown format {raw.format!r}")
    scheduler = FORMATS[raw.format][0]
    if raw.scheduler != scheduler:
        raise ParseError("bad-type", f"format {raw.format} is {scheduler}'s, the record says "
                                     f"scheduler {raw.scheduler!r}")
    events = parse_record(raw.format, raw.payload, cluster=raw.cluster,
                          received_at=raw.received_at)
    admit(raw, events)
    return events
