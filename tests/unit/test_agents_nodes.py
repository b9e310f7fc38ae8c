"""The jobs stage's node path (agents/jobs.py, "Nodes"): node records through the stage,
without Kafka, into the nodes table and out to hpc.nodes.state as NodeState documents."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest
from agents_factory import Message, RecordedOutputs, Sent, jobs_stage
from datafiles import vector

from agents.active_jobs import ActiveJobs
from agents.active_nodes import ActiveNodes
from agents.canonical import (
    decode_item,
    encode_canonical,
    encode_node_event,
    fit_node_event,
)
from agents.context import WorkerContext
from agents.job_timers import JobTimers
from agents.jobs import JobsStage
from agents.routing import job_partition
from agents.states import NodeStates, stored_nodes
from pipeline.codecs.codec import AvroCodec, raw_to_avro
from pipeline.codecs.wire import Wire
from pipeline.core.model import RawRecord
from pipeline.core.nodes import NodeEvent
from pipeline.fold.nodes import fold_nodes
from pipeline.parsers.normalize import normalize
from pipeline.runtime.config import Config
from pipeline.runtime.errors import ParseError

CFG = Config()
WIRE = Wire(CFG)
NODES = AvroCodec("NodeState")
PARTITIONS = CFG.kafka.partitions
T = 1_795_000_000


def slurm_poll(t: int, **nodes: tuple[list[str], str | None]) -> bytes:
    """A ``scontrol show nodes --json`` document at ``t``: node -> (state list, reason)."""
    return json.dumps({"last_update": t, "nodes": [
        {"name": name, "state": states, "reason": reason or "",
         "reason_set_by_user": "alice" if reason else None,
         "reason_changed_at": t - 5 if reason else 0, "partitions": ["p"]}
        for name, (states, reason) in nodes.items()]}).encode()


def raw(fmt: str, payload: bytes, cluster: str = "c", received_at: float = T + 60
        ) -> RawRecord:
    scheduler = "slurm" if fmt == "slurm-nodes" else "flux"
    return RawRecord(cluster, scheduler, fmt, received_at, payload, None)  # type: ignore[arg-type]


def value(record: RawRecord) -> bytes:
    return WIRE.codecs["raw"].encode(raw_to_avro(record))


class Run:
    """A stage fed raw records, whose re-keyed events come back through the canonical
    topic (in their key's partition), as Kafka would."""

    def __init__(self, cfg: Config = CFG, nodes: NodeStates | None = None,
                 stage: JobsStage | None = None) -> None:
        self.sent: list[Sent] = []
        self.acked: list[tuple[str, int, int]] = []
        self.stage = stage or jobs_stage(
            cfg, wire=WIRE, outputs=RecordedOutputs(self.sent), nodes=nodes,
            acknowledge=lambda m: self.acked.append((m.topic, m.partition, m.offset)))
        self.offsets: dict[tuple[str, int], int] = {}

    def message(self, topic: str, partition: int, key: bytes | None, data: bytes) -> Message:
        offset = self.offsets[topic, partition] = self.offsets.get((topic, partition), -1) + 1
        return Message(topic, partition, offset, key, data)

    def take(self, record: RawRecord, key: bytes | None = None,
             partition: int | None = None) -> None:
        if partition is None:
            partition = job_partition(key, PARTITIONS) if key else 0
        asyncio.run(self._take(self.message(CFG.topics.raw, partition, key, value(record))))

    async def _take(self, message: Message) -> None:
        stage = self.stage
        read = len(self.sent)
        wait = stage.take(message)
        if wait is not None:
            await wait
        await stage.flush()
        while True:
            pending = [s for s in self.sent[read:] if s[0] == stage.canonical]
            read = len(self.sent)
            if not pending:
                return
            for _, key, data, _ in pending:
                assert key is not None and data is not None
                wait = stage.take(self.message(stage.canonical,
                                               job_partition(key, PARTITIONS), key, data))
                if wait is not None:
                    await wait
            await stage.flush()

    def to(self, topic: str) -> list[Sent]:
        return [s for s in self.sent if s[0] == topic]

    def node_docs(self) -> dict[bytes, dict[str, Any]]:
        """The last document sent for each node."""
        docs: dict[bytes, dict[str, Any]] = {}
        for _, key, data, _ in self.to(CFG.topics.nodes):
            assert key is not None and data is not None
            docs[key] = NODES.decode(data)
        return docs


def as_written(doc: dict[str, Any]) -> dict[str, Any]:
    return NODES.decode(NODES.encode(doc))


def journal_records() -> list[RawRecord]:
    from pipeline.parsers.flux_resource import RankMaps

    maps = RankMaps()
    lines = vector("flux", "real-0.88-resource-journal.jsonl").read_bytes().splitlines()
    # received at an unknown time (0): the recording's clock is ahead of this test's T
    return [raw("flux-resource-journal", maps.record(line), "fluxtest", 0.0) for line in lines]


def test_the_recorded_resource_journal_folds_to_fold_nodes_documents() -> None:
    """The Flux resource journal's records (keyed by no node: each names several) are
    re-keyed through the canonical topic, folded in their nodes' partitions, and the last
    document of each node, keyed cluster:node, is fold_nodes' of all its events; every
    record is acknowledged; no node event goes to the job events."""
    run = Run()
    records = journal_records()
    for record in records:
        run.take(record)
    events = [ev for record in records for ev in normalize(record)]
    want = {f"{d['cluster']}:{d['node']}".encode(): as_written(d) for d in fold_nodes(events)}
    assert run.node_docs() == want
    assert set(want) == {b"fluxtest:node0", b"fluxtest:node1", b"fluxtest:node2",
                         b"fluxtest:node3"}
    assert run.to(CFG.topics.events) == [] and run.to(CFG.topics.dlq) == []
    raw_acked = sorted(o for t, _, o in run.acked if t == CFG.topics.raw)
    assert raw_acked == list(range(len(records)))


def test_a_node_record_in_its_nodes_partition_folds_there() -> None:
    """One node's poll keyed cluster:node in its partition: folded where it is read, no
    re-keying; the table holds its NodeFold, whose document is the one sent."""
    nodes = NodeStates({})
    run = Run(nodes=nodes)
    run.take(raw("slurm-nodes", slurm_poll(T, s0=(["IDLE", "DRAIN"], "bad DIMM"))),
             key=b"c:s0")
    assert run.to(run.stage.canonical) == []
    [doc] = run.node_docs().values()
    assert (doc["state"], doc["reason"], doc["reason_by"]) == ("drained", "bad DIMM", "alice")
    [(key, fold)] = stored_nodes(nodes.table)
    assert key == b"c:s0" and as_written(fold.document() or {}) == doc


def test_duplicated_and_reordered_polls_give_the_same_documents() -> None:
    polls = [raw("slurm-nodes", slurm_poll(T + i, s0=(states, reason), s1=(["IDLE"], None)))
             for i, (states, reason) in enumerate([(["IDLE"], None),
                                                   (["MIXED", "DRAIN"], "kernel"),
                                                   (["IDLE", "DRAIN"], "kernel"),
                                                   (["IDLE"], None)])]
    want = {f"c:{d['node']}".encode(): as_written(d)
            for d in fold_nodes(ev for p in polls for ev in normalize(p))}
    run = Run()
    for poll in [polls[2], polls[0], polls[3], polls[2], polls[1], polls[0]]:
        run.take(poll)
    assert run.node_docs() == want
    assert want[b"c:s0"]["state"] == "up" and want[b"c:s0"]["state_s"]["draining"] == 1.0


def test_a_copy_rewrites_the_nodes_entry_and_document() -> None:
    """As a job's: after a crash the table may be ahead of the outputs, and a copy read
    again is what makes them catch up."""
    run = Run()
    poll = raw("slurm-nodes", slurm_poll(T, s0=(["IDLE"], None)))
    run.take(poll, key=b"c:s0")
    run.stage.recent = type(run.stage.recent)()  # a restarted worker's filter is empty
    run.take(poll, key=b"c:s0")
    docs = [NODES.decode(v or b"") for _, _, v, _ in run.to(CFG.topics.nodes)]
    assert len(docs) == 2 and docs[0] == docs[1] and docs[0]["revision"] == 1


def test_reason_by_is_anonymized_by_the_user_policy(tmp_path: Any) -> None:
    key = tmp_path / "key"
    key.write_bytes(b"0123456789abcdef-site-key")
    poll = raw("slurm-nodes", slurm_poll(T, s0=(["IDLE", "DRAIN"], "alice's test")))
    for action in ("drop", "pseudonymize"):
        cfg = CFG.replace(anonymize={"fields": {"user": action}, "key_file": str(key)})
        run = Run(cfg)
        run.take(poll)
        [doc] = run.node_docs().values()
        pseudonym = run.stage.emit.anonymizer.pseudonym("user", "alice")
        assert doc["reason_by"] == (None if action == "drop" else pseudonym)
        assert "alice" not in doc["reason"]
    run = Run()  # the default policy keeps it
    run.take(poll)
    assert [d["reason_by"] for d in run.node_docs().values()] == ["alice"]


def test_a_node_state_over_its_budget_goes_to_the_dlq_and_the_others_go_on() -> None:
    run = Run(nodes=NodeStates({}, max_bytes=1500))
    run.take(raw("slurm-nodes", slurm_poll(T, s0=(["IDLE", "DRAIN"], "r" * 2000),
                                           s1=(["IDLE"], None))))
    [dead] = run.to(CFG.topics.dlq)
    headers = dict(dead[3] or [])
    assert dead[1] == b"c:s0" and headers["stage"] == b"state"
    assert headers["reason"] == b"state-too-large"
    assert json.loads(dead[2] or b"")["node"] == "s0"
    assert list(run.node_docs()) == [b"c:s1"]
    assert run.stage.nodes.get(b"c:s0") is None


def test_a_node_the_worker_died_writing_twice_goes_to_the_dlq(tmp_path: Any) -> None:
    from pipeline.runtime.crashguard import CrashGuard

    for _ in range(2):
        guard = CrashGuard(tmp_path / "g")
        guard.begin("node c:s0")
        guard.close(clean=False)
    run = Run()
    run.stage.guard = CrashGuard(tmp_path / "g")
    run.take(raw("slurm-nodes", slurm_poll(T, s0=(["IDLE"], None), s1=(["IDLE"], None))))
    [dead] = run.to(CFG.topics.dlq)
    assert dead[1] == b"c:s0" and dict(dead[3] or [])["reason"] == b"crashed-worker"
    assert list(run.node_docs()) == [b"c:s1"]


def test_node_events_cross_the_canonical_topic_in_their_wrapper() -> None:
    ev = NodeEvent(cluster="c", scheduler="slurm", node="s0", event="state", timestamp=1.5,
                   source="slurm-nodes", event_id="e1", reason="r", by="root",
                   context={"state": ["IDLE"]})
    data = encode_node_event(ev)
    assert json.loads(data) == {"node_event": ev.to_dict()}
    assert decode_item(data) == ev
    from pipeline.core.model import JobEvent
    job = JobEvent(cluster="c", scheduler="flux", job_id="1", event="submit", timestamp=1.0,
                   source="flux-journal", event_id="j1")
    assert decode_item(encode_canonical(job)) == job
    assert fit_node_event(ev, len(data)) == (ev, data)
    with pytest.raises(ParseError) as err:
        fit_node_event(replace(ev, reason="x" * 100), len(data))
    assert err.value.reason == "too-large"
    with pytest.raises(ParseError) as err:  # its key could be another node's segment's
        fit_node_event(replace(ev, node="s0\x001"), 2 * len(data))
    assert err.value.reason == "bad-node"


# --------------------------------------------------------------------------- node events

NODE_EVENTS = AvroCodec("NodeEvent")


def written_events(run: Run) -> list[tuple[bytes, dict[str, Any]]]:
    out = []
    for _, key, data, _ in run.to(CFG.topics.node_events):
        assert key is not None and data is not None
        out.append((key, NODE_EVENTS.decode(data)))
    return out


def test_each_node_event_folded_goes_to_the_node_events_topic_keyed_by_node() -> None:
    """The recorded Flux journal and a Slurm poll: one NodeEvent per distinct event,
    keyed cluster:node, its document the event's own (times in ms, context as JSON text);
    a Slurm poll's state is the node's after it, a Flux event's none."""
    run = Run()
    records = [*journal_records(),
               raw("slurm-nodes", slurm_poll(T, s0=(["MIXED", "DRAIN"], "bad DIMM")))]
    for record in records:
        run.take(record)
    events = {ev.event_id: ev for record in records for ev in normalize(record)}
    written = written_events(run)
    assert {doc["event_id"] for _, doc in written} == set(events)
    for key, doc in written:
        ev = events[doc["event_id"]]
        assert key == ev.key.encode()
        assert doc["timestamp"] == round(ev.timestamp * 1000)
        assert json.loads(doc["context"]) == ev.context
        assert (doc["reason"], doc["reason_by"]) == (ev.reason, ev.by)
    slurm = next(d for _, d in written if d["scheduler"] == "slurm")
    assert (slurm["state"], slurm["episode"]) == ("draining", f"c:s0:drain@{T - 5}")
    assert {d["state"] for _, d in written if d["scheduler"] == "flux"} == {None}
    drains = [d for _, d in written if d["event"] == "drain"]
    assert drains and all(d["episode"] == d["event_id"] for d in drains)
    assert run.to(CFG.topics.events) == []


def test_a_node_event_copy_is_written_again_as_the_same_record() -> None:
    """As a job event's copy (agents/jobs.py): after a crash the table may hold events the
    topic did not get, so a copy read again is written again, the same bytes (the sink's
    create by event_id makes them one document)."""
    run = Run()
    poll = raw("slurm-nodes", slurm_poll(T, s0=(["IDLE"], None)))
    run.take(poll, key=b"c:s0")
    run.stage.recent = type(run.stage.recent)()  # a restarted worker's filter is empty
    run.take(poll, key=b"c:s0")
    first, second = run.to(CFG.topics.node_events)
    assert first[1:3] == second[1:3]
    assert NODE_EVENTS.decode(first[2] or b"")["state"] == "up"


def test_a_node_events_reason_by_is_anonymized_by_the_user_policy(tmp_path: Any) -> None:
    key = tmp_path / "key"
    key.write_bytes(b"0123456789abcdef-site-key")
    poll = raw("slurm-nodes", slurm_poll(T, s0=(["IDLE", "DRAIN"], "alice's test")))
    cfg = CFG.replace(anonymize={"fields": {"user": "pseudonymize"}, "key_file": str(key)})
    run = Run(cfg)
    run.take(poll)
    [(_, doc)] = written_events(run)
    pseudonym = run.stage.emit.anonymizer.pseudonym("user", "alice")
    assert doc["reason_by"] == pseudonym
    assert "alice" not in doc["reason"] and "alice" not in doc["context"]
    run = Run()  # the default policy keeps it
    run.take(poll)
    assert [d["reason_by"] for _, d in written_events(run)] == ["alice"]


JOB = b"fluxtest:51204063232"


def job_records(hosts: dict[int, str]) -> list[RawRecord]:
    """The recorded job journal of the ``memos`` job (one response per event), with its
    R's nodelist named as the resource journal names the ranks: the recording's instance
    is a test one, whose R (found by hwloc) names the real host ``vm`` for every broker,
    where a real instance's R names its brokers' hosts (the worker has no rank map, and
    takes R's names: agents/jobs.py, "Allocations")."""
    out = []
    for line in vector("flux", "real-0.88-memo-journal.jsonl").read_bytes().splitlines():
        response = json.loads(line)
        R = response.get("R")
        if R is not None:
            ranks = [int(e["rank"]) for e in R["execution"]["R_lite"]]
            R["execution"]["nodelist"] = [hosts[rank] for rank in sorted(ranks)]
        out.append(raw("flux-journal", json.dumps(response).encode(), "fluxtest", 0.0))
    return out


def _recorded_hosts() -> dict[int, str]:
    from pipeline.parsers.flux_resource import RankMaps

    maps = RankMaps()
    for line in vector("flux", "real-0.88-resource-journal.jsonl").read_bytes().splitlines():
        maps.record(line)
    return maps.hosts


def _allocations(records: list[RawRecord]) -> list[NodeEvent]:
    from pipeline.parsers.flux_resource import allocation_events

    return allocation_events(ev for r in records for ev in normalize(r)
                             if not isinstance(ev, NodeEvent))


def test_a_drained_node_running_a_flux_job_is_draining_until_the_job_s_free() -> None:
    """The recorded resource journal and the job journal through the stage: node0, drained
    while the job runs on it, is ``draining`` as ``flux resource status`` showed it; after
    the job's ``free``, ``drained`` since then. The job's node events are re-keyed from its
    partition to node0's, and the documents are fold_nodes' of all the events."""
    hosts = _recorded_hosts()
    nodes, jobs = journal_records(), job_records(hosts)
    free = next(i for i, r in enumerate(jobs) if b'"name": "free"' in r.payload)
    run = Run()
    for record in nodes + jobs[:free]:
        run.take(record, key=JOB if record.format == "flux-journal" else None)
    node0 = run.node_docs()[b"fluxtest:node0"]
    assert (node0["state"], node0["scheduler_state"], node0["allocated"]) == (
        "draining", "draining", True)
    assert job_partition(JOB, PARTITIONS) != job_partition(b"fluxtest:node0", PARTITIONS)
    rekeyed = [decode_item(d or b"") for _, k, d, _ in run.to(run.stage.canonical)
               if k == b"fluxtest:node0"]
    assert [(ev.event, ev.context["job_id"]) for ev in rekeyed
            if isinstance(ev, NodeEvent) and ev.source == "flux-journal"] == [
        ("alloc", "51204063232")]

    for record in jobs[free:]:
        run.take(record, key=JOB)
    events = [ev for r in nodes for ev in normalize(r)] + _allocations(jobs)
    want = {f"{d['cluster']}:{d['node']}".encode(): as_written(d) for d in fold_nodes(events)}
    assert run.node_docs() == want
    node0 = want[b"fluxtest:node0"]
    assert (node0["state"], node0["allocated"]) == ("drained", False)
    assert node0["since"] == round(1796149904.034176 * 1000)
    assert run.to(CFG.topics.dlq) == []


def test_a_flux_job_s_allocation_is_the_same_copied_replayed_or_reordered() -> None:
    """The job's records twice (a restarted worker's filter empty between), then again in
    reverse (the free before the alloc): its node events are the same events, the node's
    document the same as of one pass, and a node's revision counts each event once."""
    hosts = _recorded_hosts()
    nodes, jobs = journal_records(), job_records(hosts)
    once = Run()
    for record in nodes + jobs:
        once.take(record, key=JOB)
    run = Run()
    for record in nodes + jobs:
        run.take(record, key=JOB)
    run.stage.recent = type(run.stage.recent)()
    for record in jobs + jobs[::-1]:
        run.take(record, key=JOB)
    assert run.node_docs() == once.node_docs()
    backwards = Run()
    for record in jobs[::-1] + nodes:
        backwards.take(record, key=JOB)
    assert backwards.node_docs() == once.node_docs()
    assert once.node_docs()[b"fluxtest:node0"]["state"] == "drained"


def test_a_flux_job_in_its_node_s_partition_folds_its_node_events_there() -> None:
    """A job whose key's partition is its node's: the node events are folded where the
    job's record is read, none re-keyed."""
    node_partition = job_partition(b"c:node0", PARTITIONS)
    job_id = next(str(i) for i in range(1, 10_000)
                  if job_partition(f"c:{i}".encode(), PARTITIONS) == node_partition)
    R = {"version": 1, "execution": {"R_lite": [{"rank": "0", "children": {"core": "0"}}],
                                     "starttime": T, "expiration": 0.0,
                                     "nodelist": ["node0"]}}
    run = Run()
    for name, t, extra in (("alloc", T, {"R": R}), ("free", T + 5, {})):
        response = {"id": int(job_id), "events": [{"timestamp": t, "name": name,
                                                   "context": {}}], **extra}
        run.take(raw("flux-journal", json.dumps(response).encode()),
                 key=f"c:{job_id}".encode())
    assert run.to(run.stage.canonical) == []
    doc = run.node_docs()[b"c:node0"]
    assert (doc["allocated"], doc["revision"], doc["since"]) == (False, 2, T * 1000)


def test_slurm_jobs_give_no_node_events() -> None:
    """A Slurm node's polls say whether it is allocated: its jobs' allocs change no node."""
    from pipeline.tooling.workload import Workload, WorkloadSpec

    records = list(Workload(WorkloadSpec(seed=3, jobs=6, start=T, flux_clusters=(),
                                         slurm_clusters=("sl",))).records())
    assert any(b"alloc" in r.payload for r in records)
    run = Run()
    for r in records:
        run.take(RawRecord(r.cluster, r.scheduler, r.format, r.time, r.payload, r.key),  # type: ignore[arg-type]
                 key=r.key.encode())
    assert run.to(CFG.topics.state) and run.node_docs() == {}


def _flux_job(run: Run, job_id: int, nodelist: str, *names: str) -> None:
    """Job ``job_id`` of cluster ``c`` allocated ``nodelist`` (one rank each), its events
    ``names`` (``alloc`` carries R) through the stage in that order."""
    from pipeline.core.hostlist import expand_hostlist

    ranks = f"0-{len(expand_hostlist(nodelist)) - 1}"
    R = {"version": 1, "execution": {"R_lite": [{"rank": ranks, "children": {"core": "0"}}],
                                     "starttime": T, "expiration": 0.0,
                                     "nodelist": [nodelist]}}
    for name in names:
        t = T if name == "alloc" else T + 5
        response = {"id": job_id, "events": [{"timestamp": t, "name": name, "context": {}}],
                    **({"R": R} if name == "alloc" else {})}
        run.take(raw("flux-journal", json.dumps(response).encode()),
                 key=f"c:{job_id}".encode())



def test_a_free_derives_only_its_own_node_events(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``free`` after its ``alloc`` derives the frees, not the allocation's ``alloc``
    node events again (one event's cost is its hosts', not the job's state's); a ``free``
    before its ``alloc`` derives none, and the ``alloc`` both. The nodes end the same."""
    import agents.jobs

    made: list[str] = []
    real = agents.jobs.job_node_events

    def counting(ev: Any, name: str, hosts: Any) -> list[NodeEvent]:
        made.append(name)
        return real(ev, name, hosts)

    monkeypatch.setattr(agents.jobs, "job_node_events", counting)
    forward, backward = Run(), Run()
    _flux_job(forward, 7, "n[0-3]", "alloc")
    assert made == ["alloc"]
    _flux_job(forward, 7, "n[0-3]", "free")
    assert made == ["alloc", "free"]
    made.clear()
    _flux_job(backward, 7, "n[0-3]", "free")
    assert made == []
    _flux_job(backward, 7, "n[0-3]", "alloc")
    assert made == ["alloc", "free"]
    docs = forward.node_docs()
    assert sorted(docs) == [f"c:n{i}".encode() for i in range(4)]
    assert {(d["allocated"], d["revision"]) for d in docs.values()} == {(False, 2)}
    assert backward.node_docs() == docs


def test_a_job_over_the_allocation_cap_gives_no_node_events(
        caplog: pytest.LogCaptureFixture) -> None:
    """A job of more hosts than MAX_ALLOCATION_HOSTS: its job document as any, no node
    event, one warning and one count; a job at the cap gives its node events."""
    from pipeline.parsers.flux_resource import MAX_ALLOCATION_HOSTS
    from pipeline.runtime.metrics import WORKER_ALLOCATIONS_UNTRACKED

    counted = WORKER_ALLOCATIONS_UNTRACKED.labels("c")
    before = counted._value.get()
    run = Run()
    _flux_job(run, 8, f"n[1-{MAX_ALLOCATION_HOSTS + 1}]", "alloc", "free")
    assert run.to(run.stage.canonical) == [] and run.node_docs() == {}
    assert counted._value.get() == before + 1
    assert [r.getMessage() for r in caplog.records if r.name == "agents.jobs"] == [
        f"job 8 of cluster c is allocated {MAX_ALLOCATION_HOSTS + 1} hosts, over "
        f"{MAX_ALLOCATION_HOSTS}: its nodes' documents do not show it (docs/flux.md)"]
    assert run.to(CFG.topics.state) and run.to(CFG.topics.dlq) == []
    at_cap = Run()
    _flux_job(at_cap, 9, f"n[1-{MAX_ALLOCATION_HOSTS}]", "alloc")
    assert len(at_cap.node_docs()) == MAX_ALLOCATION_HOSTS


# ------------------------------------------------- the snapshots' node rows (job_timers)


SNAPSHOTS = AvroCodec("QueueSnapshot")


def timers(run: Run, nodes: NodeStates, active_nodes: ActiveNodes | None = None,
           name: str = "w1") -> JobTimers:
    """The worker's timers over ``run``'s stage and ``nodes`` (its node table), the app
    left out: :meth:`JobTimers.send_snapshots` is given the partitions Faust would
    assign."""
    stage = run.stage
    context = WorkerContext(
        cfg=CFG, app=None, name=name, raw=None, canonical=None,  # type: ignore[arg-type]
        jobs={}, nodes=nodes.table, outputs=stage.outputs,  # type: ignore[arg-type]
        anonymizer=stage.emit.anonymizer, enricher=None, wire=WIRE)  # type: ignore[arg-type]
    return JobTimers(context, ActiveJobs(), stage.canonical,
                     stage.active_nodes if active_nodes is None else active_nodes)


def node_rows(run: Run, since: int = 0) -> dict[tuple[str, str, str | None], dict[str, Any]]:
    """The node rows sent to the snapshots topic (after the first ``since`` records), as
    the sink decodes them, by (cluster, state, reason)."""
    rows: dict[tuple[str, str, str | None], dict[str, Any]] = {}
    for _, key, data, _ in run.to(CFG.topics.snapshots)[since:]:
        assert data is not None
        row = SNAPSHOTS.decode(data)
        if row["node_state"] is not None:
            assert key == f"{row['cluster']}:nodes".encode()
            rows[row["cluster"], row["node_state"], row["node_reason"]] = row
    return rows


def flux_and_slurm_nodes() -> tuple[Run, NodeStates, list[NodeEvent]]:
    nodes = NodeStates({})
    run = Run(nodes=nodes)
    records = [*journal_records(), raw("slurm-nodes", slurm_poll(
        T, s0=(["IDLE", "DRAIN"], "bad DIMM"), s1=(["IDLE"], None),
        s2=(["DOWN", "NOT_RESPONDING"], "Not responding"),
        s3=(["MIXED", "DRAIN"], "bad DIMM"), s4=(["IDLE", "DRAIN"], "bad DIMM")))]
    for record in records:
        run.take(record)
    return run, nodes, [ev for record in records for ev in normalize(record)]


def test_the_snapshot_timer_sends_a_node_row_per_state_and_reason_of_its_nodes() -> None:
    """Flux's and Slurm's nodes, folded by the stage: at a snapshot, one row per
    (cluster, state, reason) of every node, counts as the documents say, at the queue
    snapshots' instant; and after the queues' snapshots."""
    run, nodes, events = flux_and_slurm_nodes()
    sent = timers(run, nodes).send_snapshots(set(range(PARTITIONS)), T + 100.0)
    rows = node_rows(run)
    want = Counter((d["cluster"], d["state"], d["reason"] or None) for d in fold_nodes(events))
    assert {k: r["node_count"] for k, r in rows.items()} == want
    assert sent == len(run.to(CFG.topics.snapshots)) == len(rows)  # no job: no queue
    assert want[("c", "drained", "bad DIMM")] == 2 and want[("c", "draining", "bad DIMM")] == 1
    assert want[("c", "down", "Not responding")] == 1 and want[("c", "up", None)] == 1
    assert {c for c, _, _ in want} == {"c", "fluxtest"}
    interval = CFG.worker.snapshot_interval_s
    for row in rows.values():
        assert row["node_s"] == row["node_count"] * interval
        assert row["timestamp"] == int((T + 100.0) // interval * interval * 1000)
        assert (row["queue"], row["worker"], row["pending_jobs"], row["reason"]) == (
            "", "w1", 0, None)


def test_two_workers_rows_add_up_and_a_new_view_reads_the_table() -> None:
    """Each worker counts the nodes of its partitions only, the two add up to the whole;
    a worker whose view is new (a restart, partitions moved) reads it from the node
    table, to the same rows."""
    run, nodes, _ = flux_and_slurm_nodes()
    everything = set(range(PARTITIONS))
    timers(run, nodes).send_snapshots(everything, T + 100.0)
    whole = {k: r["node_count"] for k, r in node_rows(run).items()}
    halves = [{p for p in everything if p % 2 == i} for i in (0, 1)]
    summed: Counter = Counter()
    for i, half in enumerate(halves):
        since = len(run.to(CFG.topics.snapshots))
        fresh = ActiveNodes()  # stale: rebuilt from the table at the first snapshot
        timers(run, nodes, fresh, name=f"w{i}").send_snapshots(half, T + 100.0)
        mine = node_rows(run, since)
        assert all(r["partitions"] == sorted(half) for r in mine.values())
        assert len(fresh) == sum(job_partition(k, PARTITIONS) in half
                                 for k, _ in stored_nodes(nodes.table))
        summed.update({k: r["node_count"] for k, r in mine.items()})
    assert summed == Counter(whole) and all(0 < len(h) < PARTITIONS for h in halves)


def test_a_node_folded_after_a_snapshot_is_in_the_next_one_as_written() -> None:
    """The view is the stage's, updated as it writes a node's document (the table is not
    read again while the partitions stay): a resumed node leaves its drain's row."""
    run, nodes, _ = flux_and_slurm_nodes()
    worker = timers(run, nodes)
    everything = set(range(PARTITIONS))
    worker.send_snapshots(everything, T + 100.0)
    assert node_rows(run)[("c", "drained", "bad DIMM")]["node_count"] == 2
    since = len(run.to(CFG.topics.snapshots))
    run.take(raw("slurm-nodes", slurm_poll(T + 200, s0=(["IDLE"], None))))
    worker.send_snapshots(everything, T + 230.0)
    rows = node_rows(run, since)
    assert rows[("c", "drained", "bad DIMM")]["node_count"] == 1
    assert rows[("c", "up", None)]["node_count"] == 2
