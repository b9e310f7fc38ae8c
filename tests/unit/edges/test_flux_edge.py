"""The Flux edge through the recorded journal source, down to the spool (no Kafka)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from datafiles import vector

from pipeline.edges.base import EdgeRuntime
from pipeline.edges.flux import (
    SINCE_META,
    FluxEdge,
    JournalDisconnected,
    RecordedJournalSource,
    Watermark,
)
from pipeline.runtime.config import Config
from pipeline.runtime.errors import ServiceError

LIVE = vector("flux", "real-0.88-journal-live.jsonl")
BACKLOG = vector("flux", "real-0.88-journal-backlog.jsonl")


def lines(path: Path) -> list[bytes]:
    return [ln for ln in path.read_bytes().split(b"\n") if ln.strip()]


def test_each_response_is_one_record_with_its_exact_bytes_and_job_key(
        runtime: EdgeRuntime, read_spool) -> None:
    edge = FluxEdge(runtime.cfg, RecordedJournalSource([LIVE]), runtime=runtime)
    for payload in lines(LIVE):
        edge.handle(payload)
    recs = read_spool(runtime.spool)
    responses = [ln for ln in lines(LIVE) if json.loads(ln)["id"] != -1]
    assert [r.payload for _, r in recs] == responses
    for key, rec in recs:
        job = json.loads(rec.payload)["id"]
        assert key == f"testcluster:{job}".encode() == (rec.key or "").encode()
        assert (rec.cluster, rec.scheduler, rec.format) == ("testcluster", "flux",
                                                             "flux-journal")
    assert edge.sentinels == 1  # the recording starts with one; it is not published


def test_responses_all_before_the_watermark_are_skipped(runtime: EdgeRuntime, read_spool
                                                        ) -> None:
    runtime.spool.set_meta(SINCE_META, "1795315640.0")
    edge = FluxEdge(runtime.cfg, RecordedJournalSource([BACKLOG]), runtime=runtime)
    for payload in lines(BACKLOG):
        edge.handle(payload)
    published = [json.loads(r.payload) for _, r in read_spool(runtime.spool)]
    assert published and edge.skipped > 0
    for resp in published:
        assert max(e["timestamp"] for e in resp["events"]) > 1795315640.0
    assert edge.skipped + len(published) == len(lines(BACKLOG)) - 1


def test_recorded_source_breaks_and_replays_connections() -> None:
    src = RecordedJournalSource([LIVE], disconnect_after=[5])
    stop = threading.Event()
    first: list[bytes] = []
    with pytest.raises(JournalDisconnected):
        for payload in src.stream(stop):
            first.append(payload)
    assert first == lines(LIVE)[:5]
    assert list(src.stream(stop)) == lines(LIVE)


def test_run_reconnects_after_a_disconnect_and_loses_nothing(edge_cfg: Config, read_spool
                                                             ) -> None:
    cfg = edge_cfg.replace(edge={"flux": {"reconnect_max_s": 0.01}})
    runtime = EdgeRuntime(cfg, "flux")
    src = RecordedJournalSource([LIVE], disconnect_after=[40])
    edge = FluxEdge(cfg, src, runtime=runtime)
    stop = threading.Event()
    # no Kafka: the run would wait forever for the spool to drain; stop it once read
    orig = edge.handle

    def handle(payload: bytes) -> None:
        orig(payload)
        if src.connections == 2 and payload == lines(LIVE)[-1]:
            stop.set()
    edge.handle = handle  # type: ignore[method-assign]
    edge.run(stop, stop_timeout=0)
    assert src.connections == 2
    from pipeline.edges.spool import Spool
    with Spool(runtime.spool.path) as spool:
        payloads = [r.payload for _, r in read_spool(spool)]
    responses = [ln for ln in lines(LIVE) if json.loads(ln)["id"] != -1]
    # nothing was confirmed by Kafka, so the replay publishes everything again
    assert payloads == responses[:39] + responses


class TestWatermark:
    def test_moves_over_the_confirmed_prefix_only(self) -> None:
        w = Watermark()
        w.sentinel()
        for seq, ts in ((1, 10.0), (2, 11.0), (3, 12.0)):
            w.add(seq, ts, backlog=False)
        assert w.acked([2, 3]) is None and w.since == 0.0
        assert w.acked([1]) == 12.0

    def test_backlog_moves_it_only_after_the_sentinel(self) -> None:
        w = Watermark(5.0)
        w.add(1, 30.0, backlog=True)   # hash order: a later job first
        w.add(2, 20.0, backlog=True)
        assert w.acked([1]) is None and w.since == 5.0
        w.sentinel()
        w.add(3, 40.0, backlog=False)
        assert w.acked([2]) == 30.0
        assert w.acked([3]) == 40.0

    def test_ignores_confirmations_it_does_not_track(self) -> None:
        w = Watermark(1.0)
        assert w.acked([99]) is None
        w.add(1, 2.0, backlog=False)
        assert w.acked([1]) == 2.0

    def test_keeps_none_of_another_journals_confirmations(self) -> None:
        # the job and resource journals share one runtime: each watermark hears both
        w = Watermark(1.0)
        w.sentinel()
        w.add(1, 2.0, backlog=False)  # pending while the other journal's go through
        for seq in range(2, 10_002):
            w.acked([seq])
        assert len(w._acked) == 0 and w.since == 1.0
        assert w.acked([1]) == 2.0 and not w._mine


def test_live_source_without_flux_bindings_is_a_clear_error() -> None:
    from pipeline.edges.flux import FluxJournalSource
    try:
        import flux  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("flux bindings installed")
    with pytest.raises(ServiceError, match="flux-python"):
        next(FluxJournalSource().stream(threading.Event()))
