"""The node-usage bench phase's feed: every sample parses, each job's document gets the
usage of its last round, and rounds come in time order (pipeline.tooling.bench.usage)."""

from __future__ import annotations

from pipeline.tooling.bench.usage import INTERVAL_S, usage_feed


def test_the_feed_is_one_sample_per_job_per_round_in_time_order() -> None:
    feed = usage_feed(5, 4, 3, seed=1, start=1_764_700_000.0)
    assert len(feed.records) == 5 * 4 * 3 and feed.total_events == len(feed.records)
    assert feed.jobs == 20
    times = [r.time for r in feed.records]
    assert times == sorted(times)
    assert max(times) - min(times) < 3 * INTERVAL_S
    for doc in feed.documents.values():
        assert doc["usage_nodes"] == 1 and doc["usage_cpu_s"] > 0 or doc["usage_cpu_s"] == 0
    # every record raises its job's revision: the probe waits for each
    last: dict[str, int] = {}
    for rec, revision in zip(feed.records, feed.revisions, strict=True):
        assert revision > last.get(rec.key, 0)
        last[rec.key] = revision
