"""Helpers of the sink's integration tests: topics, Avro test records, running the sink,
reading back Kafka offsets and Elasticsearch documents."""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from datafiles import REPO
from elasticsearch import Elasticsearch

from pipeline.codecs.codec import codecs_from_config
from pipeline.codecs.wire import Wire
from pipeline.fold.nodes import fold_nodes
from pipeline.parsers import parse_record
from pipeline.runtime.config import Config
from pipeline.sink.runner import SinkRunner
from pipeline.sink.stats import SinkStats

#: Submit times of the test jobs: two months, so both monthly indices are written.
OCT_2026 = 1_791_000_000_000  # 2026-10-03T06:40:00Z
NOV_2026 = 1_794_000_000_000  # 2026-11-06T21:20:00Z
STATES = {1: "pending", 2: "running", 3: "done"}

#: Guard against a hang only: the sink normally finishes in seconds.
GUARD_S = 300.0


def create_topics(cfg: Config, partitions: int = 2) -> None:
    admin = AdminClient(cfg.librdkafka())
    new = [NewTopic(t, partitions, 1, config={"cleanup.policy": "compact"})
           for t in (cfg.topics.state, cfg.topics.nodes)]
    new += [NewTopic(t, partitions, 1)
            for t in (cfg.topics.events, cfg.topics.snapshots, cfg.topics.node_events,
                      cfg.topics.dlq)]
    for future in admin.create_topics(new, operation_timeout=30).values():
        future.result(timeout=60)


def job_doc(n: int, revision: int, *, dated: bool = True, **extra: Any) -> dict[str, Any]:
    """A JobState of job ``n`` at ``revision`` (1 pending, 2 running, 3 done)."""
    t_submit = (OCT_2026 if n % 2 else NOV_2026) + n * 1000
    doc: dict[str, Any] = {
        "cluster": "c1", "scheduler": "slurm", "job_id": str(n), "job_name": f"job{n}",
        "user": f"u{n % 7}", "bank": f"b{n % 3}", "queue": "batch", "state": STATES[revision],
        "t_submit": t_submit if dated else None, "cores_req": 4 + n % 5, "nodes_req": 1,
        "revision": revision, "updated_at": t_submit + revision * 60_000,
    }
    if revision >= 2:
        doc.update(t_start=t_submit + 30_000, ncores=doc["cores_req"], nnodes=1,
                   nodelist=[f"n{n % 10:02d}"], wait_s=30.0)
    if revision >= 3:
        doc.update(t_end=t_submit + 90_000, result="completed", exit_code=0, run_s=60.0,
                   run_interval={"gte": t_submit + 30_000, "lt": t_submit + 90_000})
    doc.update(extra)
    return doc


def event_doc(n: int, k: int) -> dict[str, Any]:
    """Canonical event ``k`` of job ``n``."""
    name = ("submit", "start", "end")[k % 3]
    return {"cluster": "c1", "scheduler": "slurm", "job_id": str(n), "event": name,
            "timestamp": (NOV_2026 + n * 1000 + k * 30_000) / 1000.0, "source": "slurm-squeue",
            "event_id": f"c1-{n}-{k}", "seq": k, "context": '{"reason":"None"}',
            "facts": '{"queue":"batch"}'}


def snapshot_doc(k: int, worker: str = "w1") -> dict[str, Any]:
    return {"cluster": "c1", "queue": "batch", "worker": worker, "partitions": [0, 1],
            "timestamp": NOV_2026 + k * 30_000, "pending_jobs": k, "running_jobs": 2 * k,
            "pending_node_hours": 1.5 * k}


#: A recorded ``scontrol show nodes --json`` (Slurm 24.05, six nodes).
SLURM_NODES = REPO / "tests" / "data" / "slurm" / "nodes_v0.0.41_24.05.json"


def node_polls() -> list[list[Any]]:
    """The node events of four polls of :data:`SLURM_NODES` (gpu02 drained, resumed, then
    downed between them), one list per poll."""
    base = json.loads(SLURM_NODES.read_text())
    t = base["last_update"]["number"]

    def at(when: int | None) -> dict[str, Any]:
        return {"set": True, "infinite": False, "number": when or 0}

    changes: list[dict[str, Any]] = [
        {},
        {"state": ["IDLE", "DRAIN"], "reason": "fan failure", "reason_changed_at": at(t + 90),
         "reason_set_by_user": "root"},
        {"state": ["IDLE"], "reason": "", "reason_changed_at": at(None),
         "reason_set_by_user": ""},
        {"state": ["DOWN"], "reason": "Kill task failed", "reason_changed_at": at(t + 280),
         "reason_set_by_user": "slurm"},
    ]
    out: list[list[Any]] = []
    for k, change in enumerate(changes):
        poll = copy.deepcopy(base)
        poll["last_update"] = at(t + 100 * k)
        for node in poll["nodes"]:
            if node["name"] == "gpu02":
                node.update(change)
        out.append(parse_record("slurm-nodes", json.dumps(poll).encode(), cluster="c1"))
    return out


def node_revisions() -> list[dict[str, dict[str, Any]]]:
    """NodeState documents of the four polls of :func:`node_polls`, folded as the worker
    folds them: item ``k`` maps each node's id to its document after poll ``k`` (revision
    ``k + 1``)."""
    events: list[Any] = []
    out: list[dict[str, dict[str, Any]]] = []
    for poll in node_polls():
        events += poll
        out.append({f"{d['cluster']}:{d['node']}": d for d in fold_nodes(events)})
    return out


class Feed:
    """Produces Avro records to the sink's topics, keyed as the agents key them."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.codecs = codecs_from_config(cfg)
        self.producer = Producer(cfg.librdkafka(**{"enable.idempotence": True, "linger.ms": 5}))
        self.count = 0

    def raw(self, topic: str, key: bytes | str | None, value: bytes | None) -> None:
        self.producer.produce(topic, key=key, value=value)
        self.count += 1
        if self.count % 5000 == 0:
            self.producer.flush(30)

    def state(self, doc: dict[str, Any]) -> None:
        self.raw(self.cfg.topics.state, f"{doc['cluster']}:{doc['job_id']}",
                 self.codecs["state"].encode(doc))

    def event(self, ev: dict[str, Any]) -> None:
        self.raw(self.cfg.topics.events, f"{ev['cluster']}:{ev['job_id']}",
                 self.codecs["events"].encode(ev))

    def snapshot(self, snap: dict[str, Any]) -> None:
        self.raw(self.cfg.topics.snapshots, f"{snap['cluster']}:{snap['queue']}",
                 self.codecs["snapshots"].encode(snap))

    def node(self, doc: dict[str, Any]) -> None:
        self.raw(self.cfg.topics.nodes, f"{doc['cluster']}:{doc['node']}",
                 self.codecs["nodes"].encode(doc))

    def node_event(self, doc: dict[str, Any]) -> None:
        """A node event document (:func:`pipeline.fold.nodes.event_document`) as the
        worker writes it (Wire.encode_node_event: context as JSON text)."""
        self.raw(self.cfg.topics.node_events, f"{doc['cluster']}:{doc['node']}",
                 Wire(self.cfg, self.codecs).encode_node_event(doc))

    def indexed(self, doc: dict[str, Any], codec: str = "state") -> dict[str, Any]:
        """What the sink should index for a ``codec`` value (JobState unless said) ``doc``:
        Avro defaults filled, no nulls."""
        decoded = self.codecs[codec].decode(self.codecs[codec].encode(doc))
        return {k: v for k, v in decoded.items() if v is not None}

    def flush(self) -> None:
        assert self.producer.flush(60) == 0


def run_sink(runner: SinkRunner, until: Callable[[SinkStats], bool]) -> SinkStats:
    """Run ``runner`` in a thread until ``until(stats)``; fail (not hang) past GUARD_S."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["stats"] = runner.run(until=until)
        except BaseException as exc:  # reported in the test's thread
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(GUARD_S)
    if thread.is_alive():
        runner.stop()
        thread.join(60)
        pytest.fail(f"the sink did not finish within {GUARD_S} s", pytrace=False)
    if "error" in box:
        raise box["error"]
    return box["stats"]


def sink_group(cfg: Config) -> str:
    return f"{cfg.worker.app_id}-sink"


def partitions_of(cfg: Config, topic: str) -> list[TopicPartition]:
    admin = AdminClient(cfg.librdkafka())
    meta = admin.list_topics(topic, timeout=10).topics[topic]
    return [TopicPartition(topic, p) for p in sorted(meta.partitions)]


def committed(cfg: Config, topic: str) -> dict[int, int]:
    """The sink group's committed offset per partition of ``topic`` (0 when none)."""
    c = Consumer(cfg.librdkafka(**{"group.id": sink_group(cfg)}))
    try:
        got = c.committed(partitions_of(cfg, topic), timeout=30)
        return {tp.partition: max(tp.offset, 0) for tp in got}
    finally:
        c.close()


def end_offsets(cfg: Config, topic: str) -> dict[int, int]:
    c = Consumer(cfg.librdkafka(**{"group.id": "offsets-reader"}))
    try:
        return {tp.partition: c.get_watermark_offsets(tp, timeout=30)[1]
                for tp in partitions_of(cfg, topic)}
    finally:
        c.close()


def uncommitted(cfg: Config) -> int:
    """Records of the sink's topics the sink group has not committed."""
    total = 0
    for topic in (cfg.topics.state, cfg.topics.events, cfg.topics.snapshots,
                  cfg.topics.nodes, cfg.topics.node_events):
        done = committed(cfg, topic)
        total += sum(end - done[p] for p, end in end_offsets(cfg, topic).items())
    return total


def read_range(cfg: Config, topic: str, partition: int, stop: int) -> Iterator[Message]:
    """Messages of ``topic[partition]`` from offset 0 to ``stop`` (exclusive)."""
    if stop <= 0:
        return
    c = Consumer(cfg.librdkafka(**{"group.id": "range-reader", "enable.auto.commit": False}))
    try:
        c.assign([TopicPartition(topic, partition, 0)])
        seen = 0
        while seen < stop:
            msg = c.poll(10)
            if msg is None:
                pytest.fail(f"{topic}[{partition}] ended before offset {stop}", pytrace=False)
            if msg.error():
                continue
            if msg.offset() >= stop:
                return
            seen = msg.offset() + 1
            yield msg
    finally:
        c.close()


def read_dlq(cfg: Config, n: int) -> list[Message]:
    c = Consumer(cfg.librdkafka(**{"group.id": "dlq-reader", "auto.offset.reset": "earliest"}))
    c.subscribe([cfg.topics.dlq])
    out: list[Message] = []
    try:
        for _ in range(60):
            if len(out) >= n:
                break
            out += [m for m in c.consume(n - len(out), timeout=2) if not m.error()]
    finally:
        c.close()
    return out


def all_docs(es: Elasticsearch, index: str) -> dict[str, dict[str, Any]]:
    """``_id`` -> ``_source`` of every document of ``index`` (an alias or pattern)."""
    es.indices.refresh(index=index)
    out: dict[str, dict[str, Any]] = {}
    resp = es.search(index=index, size=10_000, query={"match_all": {}}, sort=["_doc"])
    for hit in resp["hits"]["hits"]:
        assert hit["_id"] not in out, f"{hit['_id']} twice in {index}"
        out[hit["_id"]] = hit["_source"]
    assert resp["hits"]["total"]["value"] == len(out), "more than 10000 documents"
    return out


def index_of(es: Elasticsearch, index: str) -> dict[str, str]:
    """``_id`` -> concrete index name, for every document of ``index``."""
    es.indices.refresh(index=index)
    resp = es.search(index=index, size=10_000, source=False, query={"match_all": {}})
    return {h["_id"]: h["_index"] for h in resp["hits"]["hits"]}
