"""Pure parts of the stream agents: the duplicate filter of stage 1, topic settings."""

from __future__ import annotations

from dataclasses import replace

from agents.normalize import RecentIds
from pipeline.config import Config
from pipeline.model import JobEvent
from pipeline.topics import RAW_MAX_MESSAGE_BYTES, topic_specs
from pipeline.wire import encode_canonical

LIVE = JobEvent(cluster="c", scheduler="flux", job_id="1", event="validate", timestamp=2.0,
                source="flux-journal", event_id="v1")


def test_recent_ids_drop_only_exact_copies() -> None:
    recent = RecentIds()
    assert not recent.seen(encode_canonical(LIVE))
    assert recent.seen(encode_canonical(LIVE))
    # the backlog's copy of the same event has its eventlog position: the fold merges the
    # two, so it must pass
    assert not recent.seen(encode_canonical(replace(LIVE, seq=1)))


def test_recent_ids_forget_the_oldest() -> None:
    recent = RecentIds(capacity=2)
    for data in (b"a", b"b", b"c"):
        assert not recent.seen(data)
    assert not recent.seen(b"a")
    assert recent.seen(b"c")


def test_raw_and_dlq_topics_take_big_records() -> None:
    cfg = Config()
    specs = topic_specs(cfg)
    for topic in (cfg.topics.raw, cfg.topics.dlq):
        assert int(specs[topic]["max.message.bytes"]) == RAW_MAX_MESSAGE_BYTES >= 10_000_000
    assert "max.message.bytes" not in specs[cfg.topics.events]
