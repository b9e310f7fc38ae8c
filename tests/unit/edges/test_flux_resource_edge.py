"""The Flux edge's resource journal through the recorded source, down to the spool (no
Kafka: what Kafka confirmed is reported as the drainer reports it)."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from datafiles import vector
from flux_views import recording_allocations, resource_drains, resource_status
from waiting import wait_until

from pipeline.core.nodes import NodeEvent
from pipeline.edges.base import EdgeRuntime
from pipeline.edges.flux import FluxEdge, RecordedJournalSource
from pipeline.edges.flux_resource import (
    RESOURCE_SINCE_META,
    FluxResourceEdge,
    FluxResourceSource,
)
from pipeline.edges.spool import Spool
from pipeline.fold.nodes import fold_nodes
from pipeline.parsers import parse_record
from pipeline.runtime.config import Config
from pipeline.runtime.errors import ServiceError

RESOURCES = vector("flux", "real-0.88-resource-journal.jsonl")
SENTINEL = b'{"events":[]}'
MAP = b'{"ranks":"0-3","nodelist":"node[0-3]",'


def lines(path: Path) -> list[bytes]:
    return [ln for ln in path.read_bytes().split(b"\n") if ln.strip()]


def play(edge: FluxResourceEdge, payloads: list[bytes]) -> None:
    """One connection's responses, as :func:`pipeline.edges.flux.follow` hands them."""
    edge.connected()
    for payload in payloads:
        edge.handle(payload)


def confirm(runtime: EdgeRuntime, seqs: list[int]) -> None:
    runtime._acked(seqs)  # the drainer's report of what Kafka confirmed


def node_events(records: list[bytes], cluster: str) -> list[NodeEvent]:
    return [ev for rec in records
            for ev in parse_record("flux-resource-journal", rec, cluster=cluster)]


def test_each_response_is_published_once_with_its_map_and_first_node_key(
        runtime: EdgeRuntime, read_spool) -> None:
    edge = FluxResourceEdge(runtime.cfg, RecordedJournalSource([RESOURCES]), runtime=runtime)
    play(edge, lines(RESOURCES))
    recs = read_spool(runtime.spool)
    responses = [ln for ln in lines(RESOURCES) if ln != SENTINEL]
    assert SENTINEL in lines(RESOURCES) and edge.sentinels == 1
    # the response's own bytes, after the map of the restart before it (the first holds it)
    assert [r.payload for _, r in recs] == [responses[0]] + [MAP + ln[1:] for ln in
                                                             responses[1:]]
    assert (edge.published, edge.skipped) == (len(responses), 0)
    assert [key for key, _ in recs] == [f"testcluster:{n}".encode() for n in (
        "node0", "node0", "node1", "node1", "node1", "node0", "node3")]
    for key, rec in recs:
        assert (rec.cluster, rec.scheduler, rec.format, rec.key) == (
            "testcluster", "flux", "flux-resource-journal", key.decode())
        first = parse_record("flux-resource-journal", rec.payload, cluster="testcluster")[0]
        assert first.key == rec.key


def test_the_published_records_fold_to_what_flux_showed_at_the_end(
        runtime: EdgeRuntime, read_spool) -> None:
    edge = FluxResourceEdge(runtime.cfg, RecordedJournalSource([RESOURCES]), runtime=runtime)
    play(edge, lines(RESOURCES))
    events = node_events([r.payload for _, r in read_spool(runtime.spool)], "testcluster")
    hosts = {ev.context["rank"]: ev.node for ev in events}
    jobs = recording_allocations("testcluster", hosts, max(ev.timestamp for ev in events))
    docs = {d["node"]: d for d in fold_nodes(events + jobs)}
    assert Counter((d["scheduler_state"], d["responding"]) for d in docs.values()) == \
        resource_status(vector("flux", "real-0.88-resource-status-end.txt"))
    drains = resource_drains(vector("flux", "real-0.88-resource-drain-end.txt"))
    assert {hosts[int(row["ranks"])]: (row["state"], row["reason"]) for row in drains} == {
        n: (d["state"], d["reason"]) for n, d in docs.items() if d["drained"]}


def test_a_reconnect_publishes_nothing_confirmed_and_names_live_ranks(
        runtime: EdgeRuntime, read_spool) -> None:
    """Kafka confirmed the backlog and the first drain; the next connection replays the
    backlog: what was confirmed is skipped, the rest is published again, and a live
    rank-only event is named by the restart the edge skipped."""
    edge = FluxResourceEdge(runtime.cfg, RecordedJournalSource([RESOURCES]), runtime=runtime)
    play(edge, lines(RESOURCES))
    first = [r.payload for _, r in read_spool(runtime.spool)]
    confirm(runtime, [1, 2, 3, 4])  # the 3 backlog responses, then the drain of rank 1
    drain_ts = json.loads(lines(RESOURCES)[4])["events"][0]["timestamp"]
    assert float(runtime.spool.get_meta(RESOURCE_SINCE_META) or 0) == drain_ts

    online = b'{"events":[{"timestamp":1796149999.5,"name":"online","context":{"idset":"3"}}]}'
    again = FluxResourceEdge(runtime.cfg, RecordedJournalSource([]), runtime=runtime)
    assert again.watermark.since == drain_ts  # from the spool: as after an edge restart
    play(again, [*lines(RESOURCES), online])
    assert (again.published, again.skipped) == (4, 4)
    replayed = [r.payload for _, r in read_spool(runtime.spool)][len(first):]
    assert replayed == first[4:] + [MAP + online[1:]]
    [back] = parse_record("flux-resource-journal", replayed[-1], cluster="testcluster")
    assert (back.node, back.event, back.context["rank"]) == ("node3", "online", 3)


def test_the_watermark_moves_only_once_the_backlog_is_closed(runtime: EdgeRuntime) -> None:
    edge = FluxResourceEdge(runtime.cfg, RecordedJournalSource([]), runtime=runtime)
    play(edge, lines(RESOURCES)[:3])  # the backlog, without its sentinel
    confirm(runtime, [1, 2, 3])
    assert runtime.spool.get_meta(RESOURCE_SINCE_META) is None


def test_the_edge_runs_both_journals_and_the_resources_reconnect(
        edge_cfg: Config, read_spool) -> None:
    cfg = edge_cfg.replace(edge={"flux": {"reconnect_max_s": 0.01}})
    runtime = EdgeRuntime(cfg, "flux")
    src = RecordedJournalSource([RESOURCES], disconnect_after=[5])
    resources = FluxResourceEdge(cfg, src, runtime=runtime)
    jobs = vector("flux", "real-0.88-journal-backlog.jsonl")
    edge = FluxEdge(cfg, RecordedJournalSource([jobs]), runtime=runtime, also=[resources])
    stop = threading.Event()
    whole = [ln for ln in lines(RESOURCES) if ln != SENTINEL]
    jobs_expected = len(lines(jobs)) - 1  # the backlog's sentinel is not published

    def stop_once_read() -> None:  # no Kafka: the run would wait for it to drain the spool
        try:
            wait_until(lambda: src.connections == 2 and resources.published == 4 + len(whole)
                       and edge.published == jobs_expected, timeout=30,
                       what="both journals read", interval=0.01)
        finally:
            stop.set()
    watcher = threading.Thread(target=stop_once_read, daemon=True)
    watcher.start()
    edge.run(stop, stop_timeout=0)
    watcher.join()
    assert src.connections == 2 and resources.sentinels == 2
    with Spool(runtime.spool.path) as spool:
        recs = [r for _, r in read_spool(spool)]
    res = [r.payload for r in recs if r.format == "flux-resource-journal"]
    assert sum(r.format == "flux-journal" for r in recs) == edge.published == jobs_expected
    # nothing was confirmed: the replay publishes the first 4 (backlog, drain) again
    assert len(res) == 4 + len(whole) and res[:4] == res[4:8]
    assert not any(t.name.startswith("flux-resource") and t.is_alive()
                   for t in threading.enumerate())


class _UntilStopped:
    """A live job journal that says nothing until the edge stops."""

    finite = False

    def stream(self, stop: threading.Event) -> Iterator[bytes]:
        stop.wait()
        return iter(())


def test_a_resource_journal_that_cannot_run_stops_the_edge_with_its_error(
        runtime: EdgeRuntime) -> None:
    try:
        import flux  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("flux bindings installed")
    resources = FluxResourceEdge(runtime.cfg, FluxResourceSource(), runtime=runtime)
    edge = FluxEdge(runtime.cfg, _UntilStopped(), runtime=runtime, also=[resources])
    stop = threading.Event()
    raised: list[BaseException] = []

    def run() -> None:
        try:
            edge.run(stop, stop_timeout=0)
        except ServiceError as exc:
            raised.append(exc)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(10)
    ended, stopped = not thread.is_alive(), stop.is_set()
    stop.set()  # a broken edge still waits: let it end
    thread.join(10)
    assert ended and stopped
    [err] = raised
    assert "flux-python" in str(err) and "--recorded-resources" in str(err)


@pytest.fixture
def flux_responses() -> Path:
    """What the fake flux bindings answer (the conftest's ``fake_flux``)."""
    return RESOURCES


def test_the_live_source_asks_rank_0_as_flux_s_consumer_does(fake_flux) -> None:  # noqa: ANN001
    got = list(FluxResourceSource("local:///run/flux/local").stream(threading.Event()))
    assert got == lines(RESOURCES)
    [(topic, payload, nodeid, flags)] = fake_flux.requests
    assert (topic, payload, nodeid) == ("resource.journal", {}, 0)
    assert flags == fake_flux.constants.FLUX_RPC_STREAMING


def test_the_live_source_names_the_resource_journal_to_a_non_owner(
        fake_flux, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    monkeypatch.setenv("FAKE_FLUX_OWNER", "12345")
    with pytest.raises(ServiceError, match="resource journal answers only the instance "
                       "owner .*uid 12345"):
        next(FluxResourceSource().stream(threading.Event()))
