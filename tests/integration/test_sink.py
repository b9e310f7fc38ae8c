"""The Elasticsearch sink against the real local Kafka and Elasticsearch.

Records are Avro-encoded JobState / JobEvent / QueueSnapshot / NodeState values on the
test's own topics; the sink writes the test's own indices (``stack_cfg`` isolates both).
"""

from __future__ import annotations

import json
import random
import threading
import time
from typing import Any

import pytest
from elasticsearch import Elasticsearch
from sink_feed import (
    NOV_2026,
    Feed,
    all_docs,
    committed,
    create_topics,
    end_offsets,
    event_doc,
    index_of,
    job_doc,
    node_polls,
    node_revisions,
    read_dlq,
    run_sink,
    snapshot_doc,
    uncommitted,
)

from pipeline.fold.nodes import event_document
from pipeline.runtime.config import Config
from pipeline.sink.names import Family, alias_name, month_of
from pipeline.sink.runner import SinkRunner
from pipeline.sink.templates import ensure_indices, swap_aliases


@pytest.fixture
def cfg(stack_cfg: Config) -> Config:
    create_topics(stack_cfg)
    return stack_cfg.replace(sink={"flush_interval_s": 0.2, "max_batch": 200})


def drain(cfg: Config, **kwargs: Any) -> SinkRunner:
    """Run a sink until it has committed everything on its topics."""
    n = uncommitted(cfg)
    runner = SinkRunner(cfg, **kwargs)
    run_sink(runner, lambda s: s.records >= n and uncommitted(cfg) == 0)
    return runner


def aliases(cfg: Config) -> tuple[str, str, str]:
    p = cfg.elasticsearch.index_prefix
    return (alias_name(p, Family.JOBS), alias_name(p, Family.EVENTS),
            alias_name(p, Family.SNAPSHOTS))


def test_states_events_and_snapshots_become_documents(cfg: Config, es: Elasticsearch) -> None:
    jobs_alias, events_alias, snaps_alias = aliases(cfg)
    feed = Feed(cfg)
    jobs = range(60)
    # Phase 1: every job's first revision; a third of the jobs do not know their submit
    # time yet (they wait in the undated index).
    for n in jobs:
        feed.state(job_doc(n, 1, dated=n % 3 != 0))
    feed.flush()
    drain(cfg)
    first = index_of(es, jobs_alias)
    assert sum(name.endswith("-undated") for name in first.values()) == 20
    # Phase 2: later revisions (all dated), events with duplicates, snapshots.
    for n in jobs:
        feed.state(job_doc(n, 2))
        feed.state(job_doc(n, 3))
        for k in range(3):
            feed.event(event_doc(n, k))
    for n in jobs[:10]:
        feed.event(event_doc(n, 1))  # redelivered
    for k in range(4):
        feed.snapshot(snapshot_doc(k))
    feed.snapshot(snapshot_doc(3))
    feed.flush()
    runner = drain(cfg)

    docs = all_docs(es, jobs_alias)
    assert set(docs) == {f"c1:{n}" for n in jobs}
    for n in jobs:
        assert docs[f"c1:{n}"] == feed.indexed(job_doc(n, 3))
    # a job lives in the month of its submit time, and nowhere else
    where = index_of(es, jobs_alias)
    for n in jobs:
        month = "2026.10" if n % 2 else "2026.11"
        assert where[f"c1:{n}"] == f"{cfg.elasticsearch.index_prefix}hpc-jobs-v1-{month}"
    events = all_docs(es, events_alias)
    assert len(events) == 180
    ev = events["c1-5-1"]
    assert ev["context"] == {"reason": "None"} and ev["@timestamp"] == round(
        event_doc(5, 1)["timestamp"] * 1000)
    snaps = all_docs(es, snaps_alias)
    assert len(snaps) == 4
    assert snaps[f"c1:batch:w1:{snapshot_doc(2)['timestamp']}"]["running_jobs"] == 4
    # the duplicates were recognised, not written twice
    assert runner.stats.duplicates + runner.stats.superseded >= 10
    assert runner.stats.dead_lettered == 0


def test_stale_or_duplicated_state_never_overwrites_newer(cfg: Config,
                                                          es: Elasticsearch) -> None:
    jobs_alias = aliases(cfg)[0]
    feed = Feed(cfg)
    for n in range(20):
        feed.state(job_doc(n, 3))
    feed.flush()
    drain(cfg)
    # Older revisions and a same-revision copy with other content arrive afterwards (in
    # other flushes, so coalescing cannot hide them): Elasticsearch keeps revision 3.
    for n in range(20):
        feed.state(job_doc(n, 1))
        feed.state(job_doc(n, 2))
        feed.state(job_doc(n, 3, state="running", job_name="impostor"))
    feed.flush()
    runner = drain(cfg)
    docs = all_docs(es, jobs_alias)
    assert {d["revision"] for d in docs.values()} == {3}
    assert {d["job_name"] for d in docs.values()} == {f"job{n}" for n in range(20)}
    assert runner.stats.written == 0
    assert runner.stats.duplicates + runner.stats.superseded == 60


def test_coalescing_writes_each_job_once_per_flush(cfg: Config, es: Elasticsearch) -> None:
    feed = Feed(cfg)
    for n in range(50):
        for rev in (1, 2, 3):
            feed.state(job_doc(n, rev))
    feed.flush()
    runner = drain(cfg.replace(sink={"max_batch": 5000, "flush_interval_s": 2.0}))
    assert runner.stats.records == 150
    # every flush wrote at most one document per job
    assert runner.stats.written + runner.stats.superseded == 150
    assert runner.stats.written <= 50 * runner.stats.flushes
    docs = all_docs(es, aliases(cfg)[0])
    assert {d["revision"] for d in docs.values()} == {3}


def test_rejected_and_undecodable_records_go_to_the_dlq(cfg: Config,
                                                        es: Elasticsearch) -> None:
    feed = Feed(cfg)
    feed.state(job_doc(1, 3))
    # Elasticsearch refuses this one for its content: a run interval that ends before it
    # starts (clock skew between sources) is not a valid date_range.
    bad = job_doc(2, 3, run_interval={"gte": NOV_2026, "lt": NOV_2026 - 1000})
    bad_value = feed.codecs["state"].encode(bad)
    feed.raw(cfg.topics.state, "c1:2", bad_value)
    feed.raw(cfg.topics.events, "c1:3", b"not avro at all")
    feed.event(event_doc(4, 0) | {"context": "[1, 2]"})
    feed.state(job_doc(5, 3))
    feed.flush()
    runner = drain(cfg)

    assert set(all_docs(es, aliases(cfg)[0])) == {"c1:1", "c1:5"}
    assert runner.stats.dead_lettered == 3
    dlq = {m.key(): m for m in read_dlq(cfg, 3)}
    assert set(dlq) == {b"c1:2", b"c1:3", b"c1:4"}
    for msg in dlq.values():
        headers = {k: v.decode() for k, v in msg.headers() or []}
        assert headers["stage"] == "sink" and headers["error"]
        assert headers["origin"].startswith((cfg.topics.state, cfg.topics.events))
    rejected = {k: v.decode() for k, v in dlq[b"c1:2"].headers() or []}
    assert rejected["reason"] == "document_parsing_exception"
    assert "min value" in rejected["error"]
    assert dlq[b"c1:2"].value() == bad_value  # the original bytes, untouched
    assert dict(dlq[b"c1:3"].headers() or [])["reason"] == b"not-avro"
    assert dlq[b"c1:3"].value() == b"not avro at all"
    assert dict(dlq[b"c1:4"].headers() or [])["reason"] == b"bad_json"
    # and everything was committed: the stream went on past the bad records
    assert committed(cfg, cfg.topics.state) == end_offsets(cfg, cfg.topics.state)


def test_tombstones_write_nothing(cfg: Config, es: Elasticsearch) -> None:
    feed = Feed(cfg)
    feed.state(job_doc(1, 3))
    feed.raw(cfg.topics.state, "c1:1", None)  # the job aged out of the compacted topic
    feed.flush()
    runner = drain(cfg)
    assert runner.stats.tombstones == 1
    assert set(all_docs(es, aliases(cfg)[0])) == {"c1:1"}


def test_node_states_become_documents_and_a_newer_revision_wins_whatever_the_order(
        cfg: Config, es: Elasticsearch) -> None:
    """NodeState values as the worker folds them (four polls of a recorded scontrol output,
    revisions 1-4 of six nodes) reach ``hpc-nodes-v1-current`` whatever order their
    revisions come in: within a flush coalescing keeps the newest, across flushes
    Elasticsearch's external version check refuses an older one. A tombstone deletes."""
    nodes_alias = alias_name(cfg.elasticsearch.index_prefix, Family.NODES)
    revisions = node_revisions()
    final = revisions[-1]
    ids = sorted(final)
    assert len(ids) == 6 and {d["revision"] for d in final.values()} == {4}
    # Half of the nodes get their newest revision first, then older ones; the others get
    # old ones first, and the newest only in the second run.
    newest_first = set(ids[::2])
    feed = Feed(cfg)
    for i in ids:
        for k in ((3, 0, 2) if i in newest_first else (0, 1)):
            feed.node(revisions[k][i])
    feed.flush()
    drain(cfg)
    for i in ids:
        for k in ((1,) if i in newest_first else (2, 3)):
            feed.node(revisions[k][i])
    feed.flush()
    runner = drain(cfg)
    assert runner.stats.duplicates == len(newest_first)  # refused by version, not coalesced
    assert runner.stats.dead_lettered == 0
    docs = all_docs(es, nodes_alias)
    assert docs == {i: feed.indexed(final[i], "nodes") for i in ids}
    assert docs["testcluster:gpu02"]["state"] == "down"
    assert {es.get(index=nodes_alias, id=i)["_version"] for i in ids} == {4}
    assert set(index_of(es, nodes_alias).values()) == {
        f"{cfg.elasticsearch.index_prefix}hpc-nodes-v1-current"}
    # a node's tombstone (none is made yet: a node leaving the cluster) deletes it
    feed.raw(cfg.topics.nodes, "testcluster:cpu03", None)
    feed.flush()
    assert drain(cfg).stats.tombstones == 1
    assert set(all_docs(es, nodes_alias)) == set(ids) - {"testcluster:cpu03"}


def test_node_events_become_one_document_per_event_id_in_their_month(
        cfg: Config, es: Elasticsearch) -> None:
    """NodeEvent values as the worker writes them (the four polls' events, every one
    twice, as after a worker's crash) reach ``hpc-node-events-v1-<month>`` once each by
    event_id, created (a copy is refused, counted as a duplicate, not dead-lettered),
    strict mapping and all: gpu02's drain and down with their state and episode."""
    alias = alias_name(cfg.elasticsearch.index_prefix, Family.NODE_EVENTS)
    events = [event_document(ev) for poll in node_polls() for ev in poll]
    by_id = {d["event_id"]: d for d in events}
    feed = Feed(cfg)
    for doc in events:
        feed.node_event(doc)
    feed.flush()
    drain(cfg)
    for doc in events:
        feed.node_event(doc)
    feed.flush()
    runner = drain(cfg)
    assert runner.stats.dead_lettered == 0
    assert runner.stats.duplicates == len(events)
    docs = all_docs(es, alias)
    assert set(docs) == set(by_id)
    assert {i: {**d, "context": json.dumps(d["context"], separators=(",", ":"))}
            for i, d in docs.items()} == {
        i: feed.indexed({**d, "context": json.dumps(d["context"], separators=(",", ":"))},
                        "node_events") for i, d in by_id.items()}
    months = {month_of(d["timestamp"]) for d in events}
    assert set(index_of(es, alias).values()) == {
        f"{cfg.elasticsearch.index_prefix}hpc-node-events-v1-{m}" for m in months}
    gpu02 = sorted((d for d in docs.values() if d["node"] == "gpu02"),
                   key=lambda d: d["timestamp"])
    assert [d.get("state") for d in gpu02][1:] == ["drained", "up", "down"]
    cluster = gpu02[0]["cluster"]  # the document names its cluster
    assert [d.get("episode", "").split("@")[0] for d in gpu02][1:] == [
        f"{cluster}:gpu02:drain", "", f"{cluster}:gpu02:down"]


def test_a_replay_generation_stays_out_of_the_aliases_until_swapped(
        cfg: Config, es: Elasticsearch) -> None:
    jobs_alias = aliases(cfg)[0]
    feed = Feed(cfg)
    for n in range(10):
        feed.state(job_doc(n, 2))
    feed.flush()
    drain(cfg)  # follows the aliases: none yet, so it writes v1 and makes it live
    replay = cfg.replace(worker={"app_id": cfg.worker.app_id + "-replay"})
    for n in range(10):
        feed.state(job_doc(n, 3))
    feed.flush()
    drain(replay, generation="v2")
    assert {d["revision"] for d in all_docs(es, jobs_alias).values()} == {2}
    swap_aliases(es, cfg.elasticsearch.index_prefix, "v1", "v2")
    assert {d["revision"] for d in all_docs(es, jobs_alias).values()} == {3}
    assert set(index_of(es, jobs_alias).values()) <= {
        f"{cfg.elasticsearch.index_prefix}hpc-jobs-v2-{m}" for m in ("2026.10", "2026.11")}



def test_many_jobs_shuffled_across_partitions(cfg: Config, es: Elasticsearch) -> None:
    """Per-job order is kept by the key; jobs interleave arbitrarily across partitions."""
    rng = random.Random(7)
    feed = Feed(cfg)
    queues = {n: [job_doc(n, r) for r in (1, 2, 3)] for n in range(300)}
    while queues:
        n = rng.choice(list(queues))
        feed.state(queues[n].pop(0))
        if not queues[n]:
            del queues[n]
    feed.flush()
    drain(cfg)
    docs = all_docs(es, aliases(cfg)[0])
    assert len(docs) == 300
    assert all(d == feed.indexed(job_doc(int(d["job_id"]), 3)) for d in docs.values())


def test_a_following_sink_writes_the_generation_the_aliases_moved_to(
        cfg: Config, es: Elasticsearch) -> None:
    prefix = cfg.elasticsearch.index_prefix
    feed = Feed(cfg)
    for n in range(10):
        feed.state(job_doc(n, 2))
    feed.flush()
    runner = SinkRunner(cfg, follow_interval_s=0.0)
    moved = threading.Event()
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            run_sink(runner, lambda s: moved.is_set() and s.records >= 20
                     and uncommitted(cfg) == 0)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    v1 = f"{prefix}hpc-jobs-v1-*"
    deadline = time.monotonic() + 120
    while len(all_docs(es, v1)) < 10:
        assert "error" not in box and time.monotonic() < deadline, box
        time.sleep(0.05)
    # A replay built v2 (here: empty) and moves the aliases.
    ensure_indices(es, prefix, "v2", live=False)
    swap_aliases(es, prefix, "v1", "v2")
    while runner.generation != "v2":
        assert "error" not in box and time.monotonic() < deadline, box
        time.sleep(0.05)
    for n in range(10):
        feed.state(job_doc(n, 3))
    feed.flush()
    moved.set()
    thread.join()
    if "error" in box:
        raise box["error"]
    assert {d["revision"] for d in all_docs(es, aliases(cfg)[0]).values()} == {3}
    assert {d["revision"] for d in all_docs(es, v1).values()} == {2}


def test_two_sinks_share_the_partitions_and_lose_nothing(stack_cfg: Config,
                                                         es: Elasticsearch) -> None:
    """A second sink joins mid-run: partitions move (revoke, assign) while records flow."""
    cfg = stack_cfg.replace(sink={"flush_interval_s": 0.2, "max_batch": 100})
    create_topics(cfg, partitions=4)
    feed = Feed(cfg)
    jobs = range(1500)
    for rev in (1, 2, 3):
        for n in jobs:
            feed.state(job_doc(n, rev))
    for n in jobs:
        feed.event(event_doc(n, 0))
    feed.flush()
    first, second = SinkRunner(cfg), SinkRunner(cfg)
    boxes: list[dict[str, Any]] = [{}, {}]

    def run(runner: SinkRunner, box: dict[str, Any]) -> None:
        try:
            box["stats"] = run_sink(runner, lambda _: uncommitted(cfg) == 0)
        except BaseException as exc:
            box["error"] = exc

    threads = [threading.Thread(target=run, args=(first, boxes[0]), daemon=True)]
    threads[0].start()
    deadline = time.monotonic() + 120
    while first.stats.flushes == 0:
        assert "error" not in boxes[0] and time.monotonic() < deadline, boxes
        time.sleep(0.02)
    threads.append(threading.Thread(target=run, args=(second, boxes[1]), daemon=True))
    threads[1].start()
    for t in threads:
        t.join()
    for box in boxes:
        if "error" in box:
            raise box["error"]
    docs = all_docs(es, aliases(cfg)[0])
    assert len(docs) == 1500 and {d["revision"] for d in docs.values()} == {3}
    assert len(all_docs(es, aliases(cfg)[1])) == 1500
    assert second.stats.records > 0, "the second sink never got a partition"


def test_a_batch_is_written_as_soon_as_its_topics_go_quiet(cfg: Config,
                                                           es: Elasticsearch) -> None:
    """A batch the worker sent whole is written at once, not when the flush interval (an
    hour here) ends it."""
    feed = Feed(cfg)
    for n in range(20):
        feed.state(job_doc(n, 1))
    feed.flush()
    runner = SinkRunner(cfg.replace(sink={"flush_interval_s": 3600.0, "max_batch": 5000}))
    stats = run_sink(runner, lambda s: s.flushes >= 1)
    assert (stats.records, stats.written) == (20, 20)
    assert len(all_docs(es, aliases(cfg)[0])) == 20
