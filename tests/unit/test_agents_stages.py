"""Pure parts of the stream agents: the duplicate filter of stage 1, the cache of job
states, topic settings."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from agents_factory import Message, RecordedOutputs, Sent, jobs_stage

from agents.active_jobs import ActiveJobs
from agents.canonical import RecentIds
from agents.jobs import JobsStage
from agents.routing import topic_partitions
from agents.states import JobStates, decode_state, encode_state
from agents.watchdog import PartitionProgress, stalled
from pipeline.codecs.wire import encode_canonical
from pipeline.core.model import JobEvent
from pipeline.core.snapshots import JobSummary, summarize
from pipeline.fold import JobFold
from pipeline.kafka.topics import RAW_MAX_MESSAGE_BYTES, topic_specs
from pipeline.runtime.config import Config

LIVE = JobEvent(cluster="c", scheduler="flux", job_id="1", event="validate", timestamp=2.0,
                source="flux-journal", event_id="v1")


def test_recent_ids_drop_only_exact_copies() -> None:
    recent = RecentIds()
    assert not recent.seen(encode_canonical(LIVE))
    assert recent.seen(encode_canonical(LIVE))
    # the backlog's copy of the same event has its eventlog position: the fold merges the
    # two, so it must pass
    assert not recent.seen(encode_canonical(replace(LIVE, seq=1)))


def test_a_bad_raw_record_is_rejected_with_its_reason_and_where_it_was_read() -> None:
    from agents.canonical import Rejected, canonical_events, dlq_headers
    from pipeline.codecs.wire import Wire

    wire = Wire(Config())
    with pytest.raises(Rejected) as bad:
        canonical_events(wire, b"not avro", 10_000)
    assert bad.value.reason == "not-avro"
    message = Message(topic="hpc.jobs.raw", partition=2, offset=41)
    assert dict(dlq_headers(message, bad.value)) == {
        "reason": b"not-avro", "stage": b"normalize", "error": bad.value.error.encode(),
        "origin": b"hpc.jobs.raw[2]@41"}

    class Broken:  # a parser bug must not stop the stream: the record is rejected
        def decode_raw(self, data: bytes) -> None:
            raise KeyError("oops")

    with pytest.raises(Rejected) as bug:
        canonical_events(Broken(), b"x", 10_000)  # type: ignore[arg-type]
    assert bug.value.reason == "internal-error" and "KeyError" in bug.value.error


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


def submit(job: str, name: str = "submit", t: float = 1.0) -> JobEvent:
    return JobEvent(cluster="c", scheduler="flux", job_id=job, event=name, timestamp=t,
                    source="flux-journal", event_id=f"{job}-{name}", facts={"uid": 5})


def test_job_states_write_through_and_read_back_from_the_table() -> None:
    table: dict[bytes, bytes] = {}
    one = JobFold()
    one.add(submit("1"))
    states = JobStates(table, capacity_bytes=2 * len(encode_state(one)))
    assert states.get(b"c:1") is None
    fold = JobFold()
    fold.add(submit("1"))
    states.put(b"c:1", fold)
    assert json.loads(table[b"c:1"]) == fold.to_dict()
    assert states.get(b"c:1") is fold and states.hits == 1
    # evicted from the cache: read back from the table, the same documents
    for job in ("2", "3"):
        other = JobFold()
        other.add(submit(job))
        states.put(f"c:{job}".encode(), other)
    again = states.get(b"c:1")
    assert again is not fold and again is not None
    assert again.documents() == fold.documents()


def test_job_states_keep_folds_within_a_budget_of_bytes_not_a_count() -> None:
    table: dict[bytes, bytes] = {}
    small = JobFold()
    small.add(submit("1"))
    size = len(encode_state(small))
    states = JobStates(table, capacity_bytes=10 * size)
    for job in range(10):
        fold = JobFold()
        fold.add(submit(str(job)))
        states.put(f"c:{job}".encode(), fold)
    assert len(states._folds) == 10 and states.cached_bytes == sum(
        len(table[key]) for key in states._folds)
    # one big job's fold takes the room of many small ones: the oldest go first
    big = JobFold()
    for n in range(12):
        big.add(submit("big", f"memo-{n}", float(n)))
    states.put(b"c:big", big)
    assert 3 * size < len(table[b"c:big"]) < 10 * size
    assert states.cached_bytes <= states.capacity_bytes
    assert b"c:0" not in states._folds and b"c:9" in states._folds
    # the newest stays even alone above the budget, and is read from memory
    states.capacity_bytes = size
    states.put(b"c:big", big)
    assert list(states._folds) == [b"c:big"] and states.get(b"c:big") is big
    # every way out of the cache gives its bytes back
    states.forget(b"c:big")
    assert states.cached_bytes == 0
    states.capacity_bytes = 10 * size
    assert states.get(b"c:3") is not None and states.cached_bytes == len(table[b"c:3"])
    states.delete(b"c:3")
    states.get(b"c:4")
    states.clear()
    assert states.cached_bytes == 0 and not states._folds


def test_job_states_forget_on_clear_and_delete() -> None:
    table: dict[bytes, bytes] = {}
    states = JobStates(table)
    fold = JobFold()
    fold.add(submit("1"))
    states.put(b"c:1", fold)
    # another worker changed the table while the partition was away
    changed = JobFold()
    changed.add(submit("1"))
    changed.add(submit("1", "alloc", 2.0))
    table[b"c:1"] = encode_state(changed)
    assert states.get(b"c:1") is fold
    states.clear()
    got = states.get(b"c:1")
    assert got is not None and len(got) == 2
    states.delete(b"c:1")
    assert b"c:1" not in table and states.get(b"c:1") is None


def test_a_state_of_the_earlier_json_serializer_still_reads() -> None:
    fold = JobFold()
    fold.add(submit("1"))
    assert decode_state(fold.to_dict()) == decode_state(encode_state(fold))
    assert decode_state(None) is None


def test_the_watchdog_tells_a_stuck_partition_and_why() -> None:
    before = {"a": PartitionProgress(read=99, committed=100, highwater=500),
              "b": PartitionProgress(read=299, committed=150, highwater=500),
              "c": PartitionProgress(read=499, committed=500, highwater=500),
              "d": PartitionProgress(read=10, committed=11, highwater=900)}
    now = {"a": PartitionProgress(read=99, committed=100, highwater=500),  # nothing read
           "b": PartitionProgress(read=499, committed=150, highwater=500),  # read, unacked
           "c": PartitionProgress(read=499, committed=500, highwater=500),  # all done
           "d": PartitionProgress(read=400, committed=300, highwater=900),  # moving
           "e": PartitionProgress(read=None, committed=None, highwater=5)}  # first check
    found = stalled(before, now)
    assert set(found) == {"a", "b"}
    # handed over by a rebalance, never read, never committed by the group: the same
    again = stalled(now, now)
    assert again["e"] == "not fetching: committed None, end 5, read up to None"
    assert found["a"].startswith("not fetching") and found["b"].startswith("not acknowledged")


def _taken(batch: Any, topic: str, partition: int, offset: int) -> None:
    batch.took(Message(topic=topic, partition=partition, offset=offset))


def test_a_batch_waits_longer_for_its_timer_while_the_worker_catches_up() -> None:
    from agents.batch import STATE_FLUSH_BEHIND_S, STATE_FLUSH_S, Batch

    assert not Batch().due(1e9, lambda: False)  # nothing to end
    batch = Batch()
    _taken(batch, "raw", 0, 5)
    start = batch.since
    assert not batch.due(start + STATE_FLUSH_S / 2, lambda: False)
    assert batch.due(start + STATE_FLUSH_S, lambda: False)
    assert not batch.due(start + STATE_FLUSH_S, lambda: True)  # behind: the count ends it
    assert batch.due(start + STATE_FLUSH_BEHIND_S, lambda: True)  # ... or this, at the latest


def test_behind_counts_the_records_waiting_past_the_batch_by_the_high_watermarks() -> None:
    from agents.batch import BEHIND_RECORDS
    from agents.routing import OfflineKafka

    kafka = OfflineKafka(4)
    ends = kafka.ends  # a partition without one is not assigned, as aiokafka says it
    stage = jobs_stage(kafka=kafka)
    _taken(stage.batch, "raw", 0, 99)
    _taken(stage.batch, "raw", 1, 9)
    _taken(stage.batch, "canonical", 0, 0)
    ends.update({("raw", 0): 100, ("raw", 1): 10, ("canonical", 0): None})
    assert not stage.behind()  # caught up; a partition not fetched yet counts nothing
    ends[("raw", 1)] = 10 + BEHIND_RECORDS
    assert not stage.behind()
    ends[("raw", 0)] = 102
    assert stage.behind()
    del ends[("raw", 0)]  # revoked: its records are someone else's now
    assert not stage.behind()


def test_every_worker_knows_the_raw_topics_partitions() -> None:
    """Faust's count is the group leader's alone; another worker reads the consumer's
    metadata (or it would re-key every record through the canonical topic)."""
    def consumer(leader: int | None, metadata: set[int] | None) -> SimpleNamespace:
        aio = SimpleNamespace(partitions_for_topic=lambda topic: metadata)
        return SimpleNamespace(topic_partitions=lambda topic: leader,
                               _thread=SimpleNamespace(_ensure_consumer=lambda: aio))

    assert topic_partitions(consumer(4, None), "raw") == 4
    assert topic_partitions(consumer(None, {0, 1, 2, 3}), "raw") == 4
    assert topic_partitions(consumer(None, None), "raw") is None


def _summary(state: str, cores: int = 1) -> JobSummary:
    return summarize(json.loads(json.dumps(
        {"cluster": "c", "queue": "batch", "state": state, "cores_req": cores,
         "pending_reason": "Priority" if state == "pending" else None})))


def test_active_jobs_by_partition_and_done_since() -> None:
    active = ActiveJobs()
    active.update(b"a", 0, _summary("pending"), now=10.0)
    active.update(b"b", 1, _summary("done"), now=11.0)
    active.update(b"b", 1, _summary("done", cores=2), now=20.0)  # done since its first
    active.update(b"c", 2, _summary("done"), now=12.0)
    active.partitions = {0, 1, 2}
    assert len(active) == 3 and active.tracks(b"b", 1) and not active.tracks(b"b", 0)
    assert active.expired(now=16.0, grace_s=4.0) == [b"b", b"c"]
    active.update(b"c", 2, _summary("running"), now=13.0)  # requeued: not done any more
    assert active.expired(now=100.0, grace_s=4.0) == [b"b"]
    assert sorted(s.cores for s in active.summaries({1, 2})) == [1, 2]
    active.keep({0, 2})
    assert len(active) == 2 and active.expired(now=100.0, grace_s=4.0) == []
    active.forget(b"a")
    assert [s.state for s in active.summaries({0, 1, 2})] == ["running"]


def test_active_jobs_give_back_the_summaries_they_were_given() -> None:
    active = ActiveJobs()
    given = [_summary("pending"), _summary("running", cores=7),
             JobSummary("c", "debug", "pending", 1, 2, 0, None, None, None),
             JobSummary("d", "batch", "done", 0, 2**40, 3, 1795870686123, 0.5, "x"),
             JobSummary("d", "batch", "pending", 1, -1, 2**32 - 1, 0, 0.0, "x")]
    for n, summary in enumerate(given):
        active.update(bytes([n]), n % 2, summary, now=0.0)
    assert sorted(active.summaries({0, 1})) == sorted(given, key=tuple)
    # a job is one record of 48 bytes in its partition, no Python object of its own,
    many = ActiveJobs()
    for n in range(10_000):
        many.update(str(n).encode(), 0, given[n % 3], now=0.0)
    assert 48 * 10_000 < many.nbytes < 63 * 10_000  # and 4 bytes of index slot, 2 to 4 a job


def stage_of(sent: list[Sent], acked: list[int], states: JobStates | None = None
             ) -> JobsStage:
    """A jobs stage whose outputs keep what is sent in ``sent``, without Kafka."""
    return jobs_stage(outputs=RecordedOutputs(sent), states=states,
                      acknowledge=lambda m: acked.append(m.offset))


def take_all(stage: JobsStage, events: list[JobEvent]) -> None:
    import asyncio

    from agents.routing import job_partition

    for offset, ev in enumerate(events):
        key = ev.key.encode()
        stage.take(Message(topic=stage.canonical, partition=job_partition(key, 8),
                           offset=offset, key=key, value=encode_canonical(ev)))
    asyncio.run(stage.flush())


def test_a_job_state_the_schema_cannot_hold_goes_to_the_dlq_and_the_stream_goes_on() -> None:
    """An event dated past any real time (admitted by a worker before admission refused
    it, here read back from the canonical topic) makes a state whose times do not fit the
    schema's longs: the state goes to the DLQ as JSON, the batch's other jobs' states go
    out, and every record is acknowledged."""
    sent: list[Sent] = []
    acked: list[int] = []
    take_all(stage_of(sent, acked), [submit("7", t=1e17), submit("8")])

    cfg = Config()
    [dead] = [s for s in sent if s[0] == cfg.topics.dlq]
    headers = dict(dead[3] or [])
    assert dead[1] == b"c:7" and headers["stage"] == b"state"
    assert headers["reason"] == b"invalid-record" and b"Avro long" in headers["error"]
    assert json.loads(dead[2] or b"")["t_submit"] == 10**20
    states = [decode_state_value(v) for t, _, v, _ in sent if t == cfg.topics.state]
    assert [s["job_id"] for s in states] == ["8"]
    assert sorted(acked) == [0, 1]


def test_a_job_state_over_its_budget_goes_to_the_dlq_and_the_job_goes_on_from_its_last() -> None:
    """A state that cannot fit the jobs table's budget even with one event of each kind
    (here a tiny budget) is not written: its latest document goes to the DLQ, stage state,
    the other jobs' states go out, every record is acknowledged."""
    sent: list[Sent] = []
    acked: list[int] = []
    table: dict[bytes, bytes] = {}
    states = JobStates(table, max_bytes=600)
    fat = replace(submit("9"), facts={"uid": 5, "job_name": "n" * 2000})
    take_all(stage_of(sent, acked, states), [fat, submit("8")])
    cfg = Config()
    [dead] = [s for s in sent if s[0] == cfg.topics.dlq]
    headers = dict(dead[3] or [])
    assert dead[1] == b"c:9" and headers["stage"] == b"state"
    assert headers["reason"] == b"state-too-large"
    assert json.loads(dead[2] or b"")["job_id"] == "9"
    assert set(table) == {b"c:8"} and states.get(b"c:9") is None
    assert [decode_state_value(v)["job_id"] for t, _, v, _ in sent
            if t == cfg.topics.state] == ["8"]
    assert sorted(acked) == [0, 1]


def test_an_event_that_cannot_be_emitted_goes_to_the_dlq_and_its_neighbours_go_on() -> None:
    """An event whose eventlog position is beyond the events schema's long (a foreign
    producer's canonical record): the event goes to the DLQ as its JSON, stage fold."""
    sent: list[Sent] = []
    acked: list[int] = []
    take_all(stage_of(sent, acked), [replace(submit("7"), seq=2**70), submit("8")])
    cfg = Config()
    [dead] = [s for s in sent if s[0] == cfg.topics.dlq]
    headers = dict(dead[3] or [])
    assert dead[1] == b"c:7" and headers["stage"] == b"fold"
    assert json.loads(dead[2] or b"")["seq"] == 2**70
    assert len([s for s in sent if s[0] == cfg.topics.events]) == 1
    assert sorted(acked) == [0, 1]


def decode_state_value(value: bytes | None) -> dict[str, object]:
    from pipeline.codecs.codec import AvroCodec

    assert value is not None
    return AvroCodec("JobState").decode(value)


def died_twice_at(path: Any, coord: Any) -> Any:
    """A crash guard as two runs left it that each died while handling ``coord``."""
    from pipeline.runtime.crashguard import CrashGuard

    for _ in range(2):
        guard = CrashGuard(path)
        guard.begin(coord)
        guard.close(clean=False)  # what a death leaves: busy at coord
    return CrashGuard(path)


def test_a_record_the_worker_died_on_twice_goes_to_the_dlq_unhandled(tmp_path: Any) -> None:
    """Whatever kills the worker while it handles a record (the OOM killer, a crash in C)
    would kill it again after every restart: the third run dead-letters the record as
    it came and goes on."""
    from pipeline.kafka.topics import canonical_topic

    cfg = Config()
    canonical = canonical_topic(cfg.worker.app_id)
    guard = died_twice_at(tmp_path / "g", (canonical, 3, 41))
    sent: list[Sent] = []
    acked: list[int] = []
    stage = stage_of(sent, acked)
    stage.guard = guard
    poison = encode_canonical(submit("7"))
    stage.take(Message(topic=canonical, partition=3, offset=41, key=b"c:7", value=poison))
    take_all(stage, [submit("8")])
    [dead] = [s for s in sent if s[0] == cfg.topics.dlq]
    headers = dict(dead[3] or [])
    assert dead[1:3] == (b"c:7", poison)
    assert headers["reason"] == b"crashed-worker" and headers["stage"] == b"normalize"
    assert [decode_state_value(v)["job_id"] for t, _, v, _ in sent
            if t == cfg.topics.state] == ["8"]
    assert sorted(acked) == [0, 41]


def test_a_job_the_worker_died_writing_twice_goes_to_the_dlq(tmp_path: Any) -> None:
    cfg = Config()
    sent: list[Sent] = []
    acked: list[int] = []
    stage = stage_of(sent, acked)
    stage.guard = died_twice_at(tmp_path / "g", "job c:7")
    take_all(stage, [submit("7"), submit("8")])
    [dead] = [s for s in sent if s[0] == cfg.topics.dlq]
    assert dead[1] == b"c:7" and dict(dead[3] or [])["reason"] == b"crashed-worker"
    assert [decode_state_value(v)["job_id"] for t, _, v, _ in sent
            if t == cfg.topics.state] == ["8"]
    assert sorted(acked) == [0, 1]


def life(job: str, t: float = 1.0) -> list[JobEvent]:
    """A Flux job's events from its submit to its end (``clean``: the job is done)."""
    return [replace(submit(job, name, t + n), facts={"uid": 5, "status": 0}
                    if name == "finish" else {"uid": 5})
            for n, name in enumerate(("submit", "alloc", "start", "finish", "clean"))]


def test_an_expiry_goes_in_the_batch_after_its_jobs_last_state() -> None:
    """An expiry (agents.job_timers) neither ends the batch nor waits for Kafka: the job's
    table entry goes, its tombstone follows its last state, whether that state was written
    in an earlier batch or is still in this one, and the expiry is acknowledged with the
    batch's other records, once their outputs are confirmed."""
    import asyncio

    from agents.routing import job_partition
    from pipeline.codecs.wire import EXPIRE, encode_control

    sent: list[Sent] = []
    acked: list[int] = []
    table: dict[bytes, bytes] = {}
    stage = stage_of(sent, acked, JobStates(table))
    cfg = Config()
    offsets = iter(range(100))

    def take(key: bytes, value: bytes) -> object:
        return stage.take(Message(topic=stage.canonical, partition=job_partition(key, 8),
                                  offset=next(offsets), key=key, value=value))

    for ev in life("1"):  # job 1 ends in the first batch
        take(ev.key.encode(), encode_canonical(ev))
    asyncio.run(stage.flush())
    for ev in life("2"):  # job 2 ends in the batch of both expiries
        take(ev.key.encode(), encode_canonical(ev))
    assert take(b"c:1", encode_control(EXPIRE)) is None
    assert take(b"c:2", encode_control(EXPIRE)) is None
    assert take(b"c:3", encode_control(EXPIRE)) is None  # a job not (or no longer) here
    assert sorted(acked) == list(range(5))  # nothing of the batch yet
    asyncio.run(stage.flush())
    assert sorted(acked) == list(range(13)) and table == {}
    assert not stage.active.expired(now=1e12, grace_s=0.0)
    for key in (b"c:1", b"c:2"):
        states = [v for t, k, v, _ in sent if t == cfg.topics.state and k == key]
        assert states[-1] is None and states[:-1]
        assert decode_state_value(states[-2])["state"] == "done"
    assert not [k for t, k, v, _ in sent if t == cfg.topics.state and k == b"c:3"]

