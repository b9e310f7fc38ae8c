"""The worker's jobs stage (agents/jobs.py) as it runs: records delivered per partition in
order, batches ended at any point, the worker killed at any point and the unacknowledged
records delivered again, some records in the wrong partition (re-keyed through the
canonical topic and read back), duplicates. Whatever happens, the last job state emitted
for every job and the table's folds equal the offline fold; and likewise for the nodes of
node records mixed in (Slurm polls; the workload's Flux resource journal and Slurm polls,
drains among them) and of the Flux jobs' allocations (their ``alloc`` and ``free``, which
the stage turns into node events, agents/jobs.py "Allocations"): the last node state
emitted for every node and the nodes table's folds are fold_nodes' documents of all their
events, the jobs' ``allocation_events`` with them; the node events written are every
distinct node event, each copy written the same.

The stage runs without Kafka: its collaborators are the tables (as RocksDB keeps what
was written before a kill, or, after half the kills, as another worker recovers them from
their changelogs, which hold only what Kafka confirmed), the outputs (kept in order, each
batch's tally confirmed a moment after the batch ended, while the stage takes the next
records; a kill loses what is not confirmed, and the dead stage acknowledges nothing
more) and the messages (acknowledged into a per-partition commit, as Faust commits the contiguous
acknowledged offsets). After the records, expiries of some jobs, finished or not (as
agents.job_timers sends them an hour after a job's end, when the commits have moved on):
a finished job's table entry goes and its tombstone is its last state record; the order
of an expiry after its job's state of the same batch is
tests/unit/test_agents_stages.py's (a copy of an event seen is dropped before the fold,
so the expiries here come in batches of their own). Kafka and Faust themselves are in
tests/integration/test_agents.py and tests/faults.
"""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import dataclass, field
from typing import Any

from agents_factory import anonymizer, canonical, enricher, jobs_stage
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.routing import job_partition
from agents.states import JobStates, NodeStates, decode_state, stored_nodes
from pipeline.codecs.codec import AvroCodec, raw_to_avro
from pipeline.codecs.wire import EXPIRE, Wire, encode_control, fit_event
from pipeline.core.model import RawRecord, job_key
from pipeline.core.nodes import NodeEvent
from pipeline.fold import JobFold, doc_id, fold
from pipeline.fold.nodes import event_document, fold_nodes, node_doc_id
from pipeline.parsers.flux_resource import allocation_events
from pipeline.parsers.normalize import normalize
from pipeline.runtime.config import Config
from pipeline.tooling.workload import Workload, WorkloadSpec

CFG = Config()
PARTITIONS = CFG.kafka.partitions
RAW, CANONICAL = CFG.topics.raw, canonical(CFG)
WIRE = Wire(CFG)
STATE_CODEC = AvroCodec("JobState")
NODE_CODEC = AvroCodec("NodeState")
EVENT_CODEC = AvroCodec("NodeEvent")
ENRICHER, ANONYMIZER = enricher(CFG), anonymizer(CFG)


@dataclass
class Message:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes


@dataclass
class Log:
    """One partition of a topic, with its commit (the contiguous acknowledged offsets)."""

    messages: list[Message] = field(default_factory=list)
    acked: set[int] = field(default_factory=set)
    committed: int = 0

    def commit(self) -> None:
        while self.committed in self.acked:
            self.committed += 1


class Killed(Exception):
    """The worker was killed while it waited for Kafka."""


@dataclass(eq=False)
class Tally:
    records: list[tuple[str, bytes | None, bytes | None]] = field(default_factory=list)


class Outputs:
    """What the stage sent, confirmed by tally a moment after it is cut (a kill loses the
    rest, and may come while a confirmation waits)."""

    def __init__(self) -> None:
        self.kill_in_flush = False
        self.confirmed: list[tuple[str, bytes | None, bytes | None]] = []
        self.tally = Tally()
        self.open: list[Tally] = []  # cut, not confirmed
        self.delivered = 0  # confirmed records the test has put into their topics

    def send(self, topic: str, key: bytes | None, value: bytes | None,
             headers: list[tuple[str, bytes]] | None = None) -> None:
        self.tally.records.append((topic, key, value))

    def poll(self) -> None:
        pass

    def cut(self) -> Tally:
        tally, self.tally = self.tally, Tally()
        self.open.append(tally)
        return tally

    async def confirm(self, tally: Tally) -> None:
        await asyncio.sleep(0)  # Kafka's reports come later: the stage goes on meanwhile
        if self.kill_in_flush:
            self.kill_in_flush = False
            raise Killed
        if tally in self.open:
            self.open.remove(tally)
            self.confirmed += tally.records

    async def flush(self) -> None:
        self.cut()
        for tally in list(self.open):
            await self.confirm(tally)

    def lose(self) -> None:
        """The worker died: what Kafka has not confirmed is gone."""
        self.tally, self.open = Tally(), []


class Store(dict[bytes, bytes]):
    """A table's store: what was written stays through a kill, as RocksDB keeps it, and
    every change also goes to the table's changelog through the outputs, as
    agents.table's does; :meth:`recovered` is the store another worker rebuilds from that
    changelog, which has only what Kafka confirmed."""

    def __init__(self, outputs: Outputs, topic: str) -> None:
        super().__init__()
        self.outputs, self.topic = outputs, topic

    def __setitem__(self, key: bytes, value: bytes) -> None:
        super().__setitem__(key, value)
        self.outputs.send(self.topic, key, value)

    def __delitem__(self, key: bytes) -> None:
        super().__delitem__(key)
        self.outputs.send(self.topic, key, None)

    def recovered(self) -> Store:
        store = Store(self.outputs, self.topic)
        for topic, key, value in self.outputs.confirmed:
            if topic == self.topic and key is not None:
                if value is None:
                    dict.pop(store, key, None)
                else:
                    dict.__setitem__(store, key, value)
        return store


def indexed(doc: dict[str, Any]) -> dict[str, Any]:
    """A job document as the worker emits it: enriched, anonymized."""
    return ANONYMIZER.document(ENRICHER.facts(doc))


def workload(seed: int, jobs: int, node_events: bool = False) -> list[tuple[bytes, bytes]]:
    codec = AvroCodec("RawRecord")
    spec = WorkloadSpec(seed=seed, jobs=jobs, rate=50.0, time_scale=0.01,
                        start=1_795_000_000.0, node_events=node_events)
    return [(r.key.encode(), codec.encode(raw_to_avro(
        RawRecord(r.cluster, r.scheduler, r.format, r.time, r.payload, r.key))))  # type: ignore[arg-type]
        for r in Workload(spec).records()]


#: a Slurm node's states over the polls, with the reason while drained or down
NODE_STATES = [(["IDLE"], None), (["MIXED"], None), (["MIXED", "DRAIN"], "kernel update"),
               (["IDLE", "DRAIN"], "bad DIMM"), (["DOWN", "NOT_RESPONDING"], "Not responding")]


def node_polls(rng: random.Random, polls: int) -> list[tuple[bytes, bytes]]:
    """``scontrol show nodes --json`` polls of three nodes, each keyed by one of them (its
    other nodes' events are re-keyed), at one time or a later one."""
    codec = AvroCodec("RawRecord")
    out = []
    t = 1_795_000_000
    for _ in range(polls):
        t += rng.choice([0, 1, 30])
        nodes = []
        for name in ("s0", "s1", "s2"):
            states, reason = rng.choice(NODE_STATES)
            nodes.append({"name": name, "state": states, "reason": reason or "",
                          "reason_set_by_user": "root" if reason else None,
                          "reason_changed_at": t - rng.choice([0, 5]) if reason else 0,
                          "partitions": ["p"]})
        payload = json.dumps({"last_update": t, "nodes": nodes}).encode()
        key = f"c:{rng.choice(['s0', 's1', 's2'])}".encode()
        out.append((key, codec.encode(raw_to_avro(RawRecord(
            "c", "slurm", "slurm-nodes", float(t), payload, key.decode())))))
    return out


def _normalized(records: list[tuple[bytes, bytes]]) -> list[Any]:
    return [ev for _, value in records for ev in normalize(WIRE.decode_raw(value))]


def _job_events(records: list[tuple[bytes, bytes]]) -> list[Any]:
    return [fit_event(ev, CFG.worker.max_event_bytes)[0] for ev in _normalized(records)
            if not isinstance(ev, NodeEvent)]


def expected(records: list[tuple[bytes, bytes]]) -> dict[str, dict[str, Any]]:
    return {doc_id(d): as_state(indexed(d)) for d in fold(_job_events(records))}


def expected_nodes(records: list[tuple[bytes, bytes]]) -> dict[str, dict[str, Any]]:
    events = [ev for ev in _normalized(records) if isinstance(ev, NodeEvent)]
    events += allocation_events(_job_events(records))
    return {node_doc_id(d): NODE_CODEC.decode(NODE_CODEC.encode(d)) for d in fold_nodes(events)}


def _done(docs: dict[str, dict[str, Any]], key: bytes) -> bool:
    """Whether the job ``key``'s latest incarnation among ``docs`` is done."""
    mine = [d for d in docs.values() if job_key(d["cluster"], d["job_id"]).encode() == key]
    return bool(mine) and max(mine, key=lambda d: d.get("incarnation") or 0)["state"] == "done"


def as_state(doc: dict[str, Any]) -> dict[str, Any]:
    """A job document as the state topic gives it back."""
    return STATE_CODEC.decode(STATE_CODEC.encode(doc))


async def run(records: list[tuple[bytes, bytes]], rng: random.Random, kills: int,
              flush_every: float, expire: list[bytes] | None = None
              ) -> tuple[Outputs, dict[bytes, bytes], dict[bytes, bytes]]:
    """The stage (killed ``kills`` times) over ``records``; then, once every record is
    taken and committed (a finished job's grace is an hour: the commits moved on), the
    expiries of the job keys ``expire``, as agents.job_timers sends them, kills too."""
    expiries = list(expire or [])
    logs = {(t, p): Log() for t in (RAW, CANONICAL) for p in range(PARTITIONS)}
    for key, value in records:
        home = job_partition(key, PARTITIONS)
        # a record of a foreign producer (or an older partitioner) lands anywhere
        partition = home if rng.random() < 0.8 else rng.randrange(PARTITIONS)
        log = logs[RAW, partition]
        log.messages.append(Message(RAW, partition, len(log.messages), key, value))
    outputs = Outputs()
    table, node_table = Store(outputs, "jobs-changelog"), Store(outputs, "nodes-changelog")
    kill_at = sorted(rng.sample(range(1, len(records) * 2), kills))
    taken = 0
    while True:
        alive = [True]

        def acknowledge(m: Message, alive: list[bool] = alive) -> None:
            assert alive[0], "a killed worker acknowledged a record"
            logs[m.topic, m.partition].acked.add(m.offset)

        stage = jobs_stage(CFG, wire=WIRE, outputs=outputs, states=JobStates(table),
                           nodes=NodeStates(node_table), acknowledge=acknowledge)
        positions = {tp: log.committed for tp, log in logs.items()}
        killed = False
        while not killed:
            _deliver_canonical(outputs, logs)
            ready = [tp for tp, log in logs.items() if positions[tp] < len(log.messages)]
            try:
                if not ready:
                    confirming = stage.confirmation
                    if not stage.batch.records and (confirming is None or confirming.done()):
                        if confirming is not None:
                            confirming.result()  # a kill while it waited
                        if not expiries:
                            break
                        for log in logs.values():
                            log.commit()
                        for key in expiries:
                            partition = job_partition(key, PARTITIONS)
                            log = logs[CANONICAL, partition]
                            log.messages.append(Message(CANONICAL, partition, len(log.messages),
                                                        key, encode_control(EXPIRE)))
                        expiries = []
                        continue
                    await stage.flush()
                    continue
                tp = rng.choice(ready)
                log = logs[tp]
                wait = stage.take(log.messages[positions[tp]])
                if wait is not None:
                    await wait
                positions[tp] += 1
                taken += 1
                if rng.random() < flush_every:
                    await stage.flush()
                if kill_at and taken >= kill_at[0]:
                    kill_at.pop(0)
                    if rng.random() < 0.5:
                        outputs.kill_in_flush = True  # at the next flush
                    else:
                        raise Killed
            except Killed:
                killed = True  # unconfirmed outputs and unacknowledged records are lost
                alive[0] = False
                if stage.confirmation is not None:
                    stage.confirmation.cancel()
                outputs.lose()
        for log in logs.values():
            log.commit()
        if not killed:
            return outputs, table, node_table
        if rng.random() < 0.5:  # the partitions go to a worker that recovers the tables
            table, node_table = table.recovered(), node_table.recovered()


def _deliver_canonical(outputs: Outputs, logs: dict[tuple[str, int], Log]) -> None:
    """Append the confirmed re-keyed records not yet in the canonical topic, where Kafka
    puts them (murmur2 of the key)."""
    for topic, key, value in outputs.confirmed[outputs.delivered:]:
        if topic == CANONICAL:
            assert key is not None and value is not None
            partition = job_partition(key, PARTITIONS)
            log = logs[CANONICAL, partition]
            log.messages.append(Message(CANONICAL, partition, len(log.messages), key, value))
    outputs.delivered = len(outputs.confirmed)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), kills=st.integers(0, 3),
       flush_every=st.sampled_from([0.0, 0.02, 0.3]), duplicates=st.integers(0, 20),
       polls=st.integers(0, 8), node_events=st.booleans())
def test_batches_kills_and_rekeying_give_the_offline_documents(
        seed: int, kills: int, flush_every: float, duplicates: int, polls: int,
        node_events: bool) -> None:
    rng = random.Random(seed)
    records = workload(seed, jobs=12, node_events=node_events) + node_polls(rng, polls)
    records += [rng.choice(records) for _ in range(duplicates)]
    want = expected(records)
    # expiries of some jobs, done or not, and of a key no job has
    keys = sorted({job_key(d["cluster"], d["job_id"]).encode() for d in want.values()})
    expire = rng.sample(keys, rng.randint(0, len(keys))) + [b"c:no-such-job"]
    outputs, table, node_table = asyncio.run(run(records, rng, kills, flush_every, expire))
    done = {key for key in expire if _done(want, key)}

    states: dict[str, dict[str, Any]] = {}
    last: dict[bytes, bytes | None] = {}
    for topic, key, value in outputs.confirmed:
        if topic == CFG.topics.state:
            assert key is not None
            assert last.get(key, b"") is not None, "a state after its job's tombstone"
            last[key] = value
        if topic == CFG.topics.state and value is not None:
            doc = STATE_CODEC.decode(value)
            known = states.get(doc_id(doc))
            if known is None or doc["revision"] >= known["revision"]:
                states[doc_id(doc)] = doc  # the sink keeps the highest revision
    assert states == want
    # a finished job expired: its tombstone last; any other job's last record a state
    assert {key for key, value in last.items() if value is None} == done

    folded = {doc_id(d): as_state(indexed(d))
              for state in map(decode_state, table.values()) if state is not None
              for d in JobFold.from_dict(state).documents()}
    assert folded == {i: d for i, d in want.items()
                      if job_key(d["cluster"], d["job_id"]).encode() not in done}

    want_nodes = expected_nodes(records)
    nodes: dict[str, dict[str, Any]] = {}
    for topic, key, value in outputs.confirmed:
        if topic == CFG.topics.nodes and value is not None:
            doc = NODE_CODEC.decode(value)
            assert key == node_doc_id(doc).encode()
            known = nodes.get(node_doc_id(doc))
            if known is None or doc["revision"] >= known["revision"]:
                nodes[node_doc_id(doc)] = doc
    assert nodes == want_nodes
    node_folds = {key.decode(): NODE_CODEC.decode(NODE_CODEC.encode(fold.document() or {}))
                  for key, fold in stored_nodes(node_table)}
    assert node_folds == want_nodes

    # every node event on hpc.nodes.events, keyed by its node; its copies (redeliveries,
    # kills) the same record, so the sink's create by event_id makes them one document
    want_events = {ev.event_id: EVENT_CODEC.decode(WIRE.encode_node_event(event_document(ev)))
                   for ev in _normalized(records) if isinstance(ev, NodeEvent)}
    written: dict[str, bytes] = {}
    for topic, key, value in outputs.confirmed:
        if topic == CFG.topics.node_events:
            assert value is not None
            doc = EVENT_CODEC.decode(value)
            assert key == f"{doc['cluster']}:{doc['node']}".encode()
            assert written.setdefault(doc["event_id"], value) == value
    assert {i: EVENT_CODEC.decode(v) for i, v in written.items()} == want_events
