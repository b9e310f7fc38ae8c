"""The stream agents on the real broker: ``jobstream worker`` subprocesses fed through the
raw topic, their output topics read back and compared with the offline pipeline (the same
pure parse -> fold -> enrich -> anonymize functions, :func:`workers.offline`).

1. a mixed Flux + Slurm stream (generated jobs, the real vectors, duplicates, shuffled
   jobs, R before submit, a 5 MB jobspec, malformed records) gives the offline states,
   events and DLQ;
2. SIGKILL twice while processing ~20,000 events: nothing lost, nothing counted twice;
3. anonymization: no identity in any output, pseudonyms stable across a restart;
4. two workers: queue snapshots add up, the job query answers from either;
5. figures, printed (``pytest -s``): events/s of one worker, memory at 100,000 jobs.

Every wait ends on a condition (the worker's committed offsets reach the ends of its input
topics, see :mod:`workers`); the time limits there only guard against a hang.
"""

from __future__ import annotations

import json
import random
import re
import signal
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from datafiles import vector as vector_file
from topic_reads import Msg, end_offsets, read_topic
from workers import (
    Raw,
    WorkerProcess,
    as_state,
    diff_states,
    event_ids,
    grep_log,
    latest_states,
    offline,
    publish,
    shuffled_within_jobs,
    stages,
    wait_caught_up,
    wait_for,
)

from pipeline.codecs.codec import AvroCodec
from pipeline.core.model import RawRecord
from pipeline.core.snapshots import build_snapshots, summarize
from pipeline.edges.base import record_key
from pipeline.fold import JobFold, doc_id
from pipeline.parsers import split_records
from pipeline.runtime.config import Config
from pipeline.tooling.workload import Workload, WorkloadSpec

#: received_at of the vector records: fixed (the offline parse sees what the worker sees)
#: and after every recorded event (the stream refuses events from the future)
RECEIVED = 1_800_000_000.0
START = 1_790_000_000.0
#: node samples every 2 minutes of job time in the large kill and stop workloads, as in the
#: faults suite: samples through a restart, at a third of the records of the default 30 s
SPARSE_SAMPLES_S = 120.0
#: a stopped worker exits well within this (it takes a few seconds)
STOP_GUARD_S = 60.0


def generated(spec: WorkloadSpec) -> list[Raw]:
    """The raw messages of a generated workload, in time order."""
    return [Raw(r.key, RawRecord(r.cluster, r.scheduler, r.format, r.time, r.payload, r.key))
            for r in Workload(spec).records()]


def vector(fmt: str, path: Path, cluster: str) -> list[Raw]:
    """The records of a vector file as an edge publishes them (keyed by the parser)."""
    scheduler = "flux" if fmt.startswith("flux") else "slurm"
    out = []
    for _, payload in split_records(fmt, path.read_bytes()):
        if fmt == "flux-journal" and json.loads(payload)["id"] == -1:
            continue  # the backlog's end sentinel: the edge does not publish it
        key = record_key(fmt, payload, cluster, RECEIVED)
        out.append(Raw(key, RawRecord(cluster, scheduler, fmt, RECEIVED, payload, key)))  # type: ignore[arg-type]
    return out


def real_vectors() -> list[Raw]:
    out: list[Raw] = []
    for name in ("real-0.88-journal-live.jsonl", "real-0.88-journal-backlog.jsonl",
                 "journal-live_DERIVED.jsonl", "journal-backlog_DERIVED.jsonl"):
        out += vector("flux-journal", vector_file("flux", name), "flux-real")
    out += vector("slurm-jobcomp", vector_file("slurm", "jobcomp_22.05_sample.jsonl"),
                  "testcluster")
    out += vector("slurm-squeue", vector_file("slurm", "squeue_running_22.05.json"),
                  "testcluster")
    for hook in sorted(vector_file("slurm", "hooks").glob("*.env")):
        out += vector("slurm-hook", hook, "testcluster")
    return out


def bad(fmt: str, payload: bytes, *, cluster: str = "flux-a", scheduler: str = "flux",
        key: str = "flux-a:bad") -> Raw:
    return Raw(key, RawRecord(cluster, scheduler, fmt, RECEIVED, payload, key))  # type: ignore[arg-type]


BLOB_MARK = "JOBSTREAM-BLOB-"


def with_huge_jobspec(msg: Raw, size: int) -> Raw:
    """A Flux submit response whose jobspec carries a ``size``-byte ``attributes.user``."""
    assert msg.record is not None
    response = json.loads(msg.record.payload)
    assert response["events"][0]["name"] == "submit"
    blob = (BLOB_MARK * (size // len(BLOB_MARK) + 1))[:size]
    response["jobspec"]["attributes"]["user"] = {"notes": blob}
    payload = json.dumps(response, separators=(",", ":")).encode()
    r = msg.record
    return Raw(msg.key, RawRecord(r.cluster, r.scheduler, r.format, r.received_at, payload,
                                  r.key))


def positions(messages: list[Raw], key: str, event: str) -> list[int]:
    return [i for i, m in enumerate(messages)
            if m.key == key and m.record is not None and m.record.format == "flux-journal"
            and json.loads(m.record.payload)["events"][0]["name"] == event]


def insert_randomly(messages: list[Raw], extra: list[Raw], rng: random.Random) -> list[Raw]:
    out = list(messages)
    for m in extra:
        out.insert(rng.randrange(len(out) + 1), m)
    return out


# -- 1. a mixed stream ----------------------------------------------------------------


def mixed_stream(rng: random.Random) -> tuple[list[Raw], dict[str, Any]]:
    """Generated Flux and Slurm jobs, the real vectors (journal backlog and live: the same
    jobs twice), extra duplicates, jobs in shuffled order, a Flux job whose R comes before
    its submit, a 5 MB jobspec and malformed records; and what to look for."""
    msgs = generated(WorkloadSpec(seed=11, jobs=300, start=START, time_scale=0.05))
    msgs = shuffled_within_jobs(msgs, rng, share=0.2)
    flux_keys = sorted({m.key for m in msgs if m.key and m.key.startswith("flux-a:")})
    # R before submit: the alloc response (with R) of one job ahead of its submit
    r_first = flux_keys[0]
    (submit_at,), (alloc_at,) = positions(msgs, r_first, "submit"), positions(msgs, r_first,
                                                                               "alloc")
    if alloc_at > submit_at:
        msgs[submit_at], msgs[alloc_at] = msgs[alloc_at], msgs[submit_at]
    # a 5 MB jobspec
    huge_key = flux_keys[1]
    (huge_at,) = positions(msgs, huge_key, "submit")
    msgs[huge_at] = with_huge_jobspec(msgs[huge_at], 5 * 1024 * 1024)
    msgs = insert_randomly(msgs, real_vectors(), rng)
    msgs = insert_randomly(msgs, rng.sample(msgs, len(msgs) // 10), rng)  # duplicates
    malformed = {
        "invalid-json": bad("flux-journal", b'{"id": 1, "events": ['),
        "invalid-utf8": bad("slurm-jobcomp", b'{"jobid": 7, "username": "\xff\xfe"}',
                            cluster="slurm-b", scheduler="slurm", key="slurm-b:7"),
        "not-avro": Raw("flux-a:junk", value=b"this is not Avro at all"),
        "unknown-format": bad("pbs-accounting", b"04/01/2026 12:00:00;E;42.pbs;user=x"),
        "payload-bad": bad("flux-journal", b'{"id": "not-a-job", "events": 3}'),
        "empty": Raw("flux-a:empty", value=b""),
        "huge-invalid": bad("flux-journal", b'{"id": 2, "jobspec": "' + b"x" * 3_000_000),
    }
    msgs = insert_randomly(msgs, list(malformed.values()), rng)
    return msgs, {"r_first": r_first, "huge": huge_key, "malformed": malformed}


def test_mixed_stream_gives_the_offline_fold(stack_cfg: Config,
                                             spawn: Callable[..., WorkerProcess]) -> None:
    rng = random.Random(4)
    messages, marks = mixed_stream(rng)
    expected = offline(stack_cfg, messages)
    assert len(expected.bad) == len(marks["malformed"])
    publish(stack_cfg, messages)

    worker = spawn(stack_cfg).start()
    wait_caught_up(stack_cfg, [worker])
    worker.stop()

    states = read_topic(stack_cfg, stack_cfg.topics.state)
    events = read_topic(stack_cfg, stack_cfg.topics.events)
    dlq = read_topic(stack_cfg, stack_cfg.topics.dlq)

    got = latest_states(states)
    assert not diff_states(got, expected.docs), diff_states(got, expected.docs)
    assert set(event_ids(events)) == expected.event_ids

    # the job whose R came first, and the 5 MB jobspec's job, folded like any other
    for key in (marks["r_first"], marks["huge"]):
        assert got[key]["state"] == "done" and got[key]["nnodes"], got[key]
    blob = BLOB_MARK.encode()
    assert not any(m.value and blob in m.value for m in states + events)
    submit = _event(events, marks["huge"], "submit")
    assert submit["jobspec"] is None and json.loads(submit["context"])["jobspec_truncated"]
    other = _event(events, marks["r_first"], "submit")
    assert json.loads(other["jobspec"])["attributes"]["system"]["queue"]

    # every bad record in the DLQ once, with why, as it came
    got_bad = Counter(m.value for m in dlq)
    assert got_bad == Counter(expected.bad.keys()), got_bad
    for m in dlq:
        assert m.value is not None
        assert m.headers["reason"].decode() == expected.bad[m.value]
        assert m.headers["stage"] == b"normalize" and m.headers["error"]
    reasons = {name: expected.bad[r.encode(AvroCodec("RawRecord"))]
               for name, r in marks["malformed"].items()}
    assert reasons["not-avro"] == "not-avro" and reasons["unknown-format"] == "unknown-format"


def _event(events: list[Msg], key: str, name: str) -> dict[str, Any]:
    codec = AvroCodec("JobEvent")
    found = [d for d in (codec.decode(m.value) for m in events if m.value)
             if f"{d['cluster']}:{d['job_id']}" == key and d["event"] == name]
    assert found, f"no {name} event of {key}"
    return found[0]


# -- 2. SIGKILL while processing ------------------------------------------------------


def event_count(cfg: Config) -> int:
    return sum(end_offsets(cfg, cfg.topics.events).values())


def changelog_docs(cfg: Config) -> dict[str, dict[str, Any]]:
    """doc_id -> document, folded from the latest value of every key of the table's
    changelog: what a worker that takes the partitions over would start from."""
    latest: dict[bytes, bytes | None] = {}
    for m in read_topic(cfg, f"{cfg.worker.app_id}-jobs-changelog"):
        assert m.key is not None
        latest[m.key] = m.value
    enricher, anonymizer = stages(cfg)
    docs = [d for v in latest.values() if v is not None
            for d in JobFold.from_dict(json.loads(v)).documents()]
    return {doc_id(d): anonymizer.document(enricher.facts(d)) for d in docs}


def test_sigkill_while_processing_loses_and_double_counts_nothing(
        stack_cfg: Config, spawn: Callable[..., WorkerProcess]) -> None:
    messages = generated(WorkloadSpec(seed=21, jobs=2000, start=START, time_scale=0.05,
                                        usage_interval_s=SPARSE_SAMPLES_S))
    expected = offline(stack_cfg, messages)
    assert len(expected.events) >= 18_000
    publish(stack_cfg, messages)

    # static membership: the restarted worker gets its partitions back without waiting
    # for the group to time the killed one out; a partition stuck after a restart (see
    # agents/watchdog.py) is read again within half a minute
    worker = spawn(stack_cfg, instance_id="crash-w1", stall_check_s=15.0).start()
    total = len(expected.events)
    recoveries = []
    for share in (0.15, 0.5):
        wait_for(f"{share:.0%} of the events", lambda s=share: event_count(stack_cfg) >= s * total,
                 [worker])
        worker.kill()
        killed_at, before = time.monotonic(), event_count(stack_cfg)
        worker.start()
        wait_for("new events after the restart", lambda b=before: event_count(stack_cfg) > b,
                 [worker])
        recoveries.append(time.monotonic() - killed_at)
    wait_caught_up(stack_cfg, [worker])
    worker.stop()
    stuck = grep_log(worker, "is stuck")
    print("\nrestart to first new event after SIGKILL: "
          + ", ".join(f"{s:.1f} s" for s in recoveries)
          + f"; partitions read again by the watchdog: {len(stuck)}")

    got = latest_states(read_topic(stack_cfg, stack_cfg.topics.state))
    assert not diff_states(got, expected.docs), diff_states(got, expected.docs)
    ids = event_ids(read_topic(stack_cfg, stack_cfg.topics.events))
    assert set(ids) == expected.event_ids
    # the changelog holds every job's whole state too (another worker would start from it)
    from_changelog = changelog_docs(stack_cfg)
    assert not diff_states({k: as_state(v) for k, v in from_changelog.items()}, expected.docs)


def test_sigterm_while_processing_stops_the_worker_and_loses_nothing(
        stack_cfg: Config, spawn: Callable[..., WorkerProcess]) -> None:
    """A worker told to stop while records flow has a batch open: stopping waits until
    every record delivered is acknowledged, so that batch must still end (a Faust timer
    would not: they stop first, and the worker waited for ever)."""
    messages = generated(WorkloadSpec(seed=22, jobs=1000, start=START, time_scale=0.05,
                                        usage_interval_s=SPARSE_SAMPLES_S))
    expected = offline(stack_cfg, messages)
    publish(stack_cfg, messages)
    worker = spawn(stack_cfg, instance_id="term-w1").start()
    total = len(expected.events)
    for share in (0.2, 0.6):
        wait_for(f"{share:.0%} of the events", lambda s=share: event_count(stack_cfg) >= s * total,
                 [worker])
        assert worker.proc is not None
        worker.proc.send_signal(signal.SIGTERM)
        worker.proc.wait(STOP_GUARD_S)  # TimeoutExpired: it did not stop
        assert worker.proc.returncode == 0, worker.output()[-6000:]
        assert not grep_log(worker, "wait_empty: Waiting")
        worker.start()
    wait_caught_up(stack_cfg, [worker])
    worker.stop()

    got = latest_states(read_topic(stack_cfg, stack_cfg.topics.state))
    assert not diff_states(got, expected.docs), diff_states(got, expected.docs)
    assert set(event_ids(read_topic(stack_cfg, stack_cfg.topics.events))) == expected.event_ids
    from_changelog = changelog_docs(stack_cfg)
    assert not diff_states({k: as_state(v) for k, v in from_changelog.items()}, expected.docs)


# -- 3. anonymization -----------------------------------------------------------------

POLICY = {"user": "pseudonymize", "uid": "pseudonymize", "group": "pseudonymize",
          "gid": "drop", "cwd": "drop"}
_ID_KEYS = ("uid", "gid", "userid", "user_id", "group_id")


def identities(plain: Config, messages: list[Raw]) -> tuple[set[str], set[int]]:
    """Every user name, group name and path, and every uid and gid, the input tells (after
    enrichment: a uid the host knows gives a name too); ``plain`` has no policy."""
    enricher, _ = stages(plain)
    names: set[str] = set()
    kept: set[str] = set()
    ids: set[int] = set()
    expected = offline(plain, messages)
    for values in [enricher.facts(ev.facts) for ev in expected.events] + list(
            expected.docs.values()):
        names |= {str(values[f]) for f in ("user", "group", "cwd") if values.get(f)}
        ids |= {int(values[f]) for f in ("uid", "gid") if values.get(f) is not None}
        kept |= {str(values[f]) for f in ("bank", "queue", "qos", "job_name") if values.get(f)}
    # a name that is also a kept value cannot be looked for (Slurm's account "root")
    return names - kept, ids


def leaks(messages: list[Msg], codec: AvroCodec, names: set[str], ids: set[int]) -> list[str]:
    """Where an identity shows in the decoded values (as JSON text: names and paths
    anywhere, uids under an id key) or in the bytes on the wire."""
    found = []
    for m in messages:
        if m.value is None:
            continue
        value = codec.decode(m.value)
        for name in ("context", "facts", "jobspec", "R", "record"):
            if isinstance(value.get(name), str):
                value[name] = json.loads(value[name])
        text = json.dumps(value)
        found += [f"{n!r} in ...{text[max(text.index(n) - 80, 0):text.index(n) + 40]}"
                  for n in names if n in text]
        found += [f"{n!r} in the bytes" for n in names if n.encode() in m.value]
        found += [f"{k}={v} in {text[:200]}" for k, v in _id_values(value) if v in ids]
    return found


def _id_values(value: Any, key: str = "") -> Iterator[tuple[str, int]]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _id_values(v, str(k).lower())
    elif isinstance(value, list):
        for v in value:
            yield from _id_values(v, key)
    elif isinstance(value, int | str) and not isinstance(value, bool) and any(
            h in key for h in _ID_KEYS) and str(value).isdigit():
        yield key, int(value)


def test_anonymized_outputs_show_no_identity_and_pseudonyms_survive_a_restart(
        stack_cfg: Config, spawn: Callable[..., WorkerProcess], tmp_path: Path) -> None:
    key_file = tmp_path / "site.key"
    key_file.write_text("a site secret of the test, 32 bytes\n")
    cfg = stack_cfg.replace(anonymize={"key_file": str(key_file), "fields": POLICY},
                            worker={"snapshot_interval_s": 1.0})
    first = generated(WorkloadSpec(seed=31, jobs=120, start=START, time_scale=0.05))
    second = generated(WorkloadSpec(seed=32, jobs=120, start=START + 10_000, time_scale=0.05))
    first += real_vectors()
    names, ids = identities(stack_cfg, first + second)
    assert {"alice", "/home/slurmtest/jobs"} <= names and {0, 1001} <= ids

    worker = spawn(cfg)
    for part in (first, second):  # a restart between the two halves
        publish(cfg, part)
        worker.start()
        wait_caught_up(cfg, [worker])
        wait_for("a queue snapshot", lambda: sum(end_offsets(cfg, cfg.topics.snapshots)
                                                  .values()) > 0, [worker])
        worker.stop()

    expected = offline(cfg, first + second)
    states = read_topic(cfg, cfg.topics.state)
    events = read_topic(cfg, cfg.topics.events)
    snapshots = read_topic(cfg, cfg.topics.snapshots)
    got = latest_states(states)
    assert not diff_states(got, expected.docs), diff_states(got, expected.docs)
    assert set(event_ids(events)) == expected.event_ids
    found = (leaks(states, AvroCodec("JobState"), names, ids)
             + leaks(events, AvroCodec("JobEvent"), names, ids)
             + leaks(snapshots, AvroCodec("QueueSnapshot"), names, ids))
    assert not found, '\n'.join(sorted(set(found))[:30])

    # one user, one pseudonym, before and after the restart
    _, anonymizer = stages(cfg)
    alice = anonymizer.pseudonym("user", "alice")
    truth = {**Workload(WorkloadSpec(seed=31, jobs=120, start=START, time_scale=0.05)).truth,
             **Workload(WorkloadSpec(seed=32, jobs=120, start=START + 10_000,
                                     time_scale=0.05)).truth}
    slurm_alice = {k for k, t in truth.items() if t.get("user") == "alice"}
    halves = [{k for k in slurm_alice if any(m.key == k for m in part)}
              for part in (first, second)]
    assert all(halves), "alice has Slurm jobs in both halves"
    assert {got[k]["user"] for k in slurm_alice} == {alice}
    assert all(got[k]["gid"] is None and got[k]["cwd"] is None for k in got)


# -- 4. two workers: queue snapshots and the job query --------------------------------

_ADDITIVE = ("pending_jobs", "running_jobs", "pending_cores", "running_cores", "pending_gpus",
             "running_gpus", "pending_nodes", "running_nodes", "pending_node_hours")


def submits_only(messages: list[Raw]) -> list[Raw]:
    """The first record of every job (a Flux submit, a pending squeue): jobs that wait."""
    seen: set[str | None] = set()
    out = []
    for m in messages:
        if m.key not in seen:
            seen.add(m.key)
            out.append(m)
    return out


def partitions_logged(worker: WorkerProcess) -> set[int] | None:
    """The partitions of the worker's last snapshot round (None before the first)."""
    lines = grep_log(worker, r"queue snapshots: partitions=")
    if not lines:
        return None
    found = re.search(r"partitions=(\[[\d, ]*\])", lines[-1])
    assert found is not None
    return set(json.loads(found[1]))


def get_job(port: int, cluster: str, job_id: str) -> tuple[int, Any]:
    url = f"http://127.0.0.1:{port}/jobs/{cluster}/{job_id}"
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:  # noqa: S310 - our own worker
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_two_workers_share_the_queues_and_answer_for_each_other(
        stack_cfg: Config, spawn: Callable[..., WorkerProcess]) -> None:
    interval = 2.0
    cfg = stack_cfg.replace(worker={"snapshot_interval_s": interval})
    messages = submits_only(generated(WorkloadSpec(seed=41, jobs=400, start=START)))
    expected = offline(cfg, messages)
    assert {d["state"] for d in expected.docs.values()} == {"pending"}

    workers = [spawn(cfg, name=f"w{i}").start() for i in (1, 2)]
    # both in the group, sharing the partitions, before any record comes
    wait_for("the partitions shared by two workers", lambda: _split(workers), workers)
    publish(cfg, messages)
    wait_caught_up(cfg, workers)
    after_ms = int(time.time() * 1000)

    codec = AvroCodec("QueueSnapshot")

    def rounds() -> dict[int, list[dict[str, Any]]]:
        """Snapshot timestamp -> the latest snapshot of each worker and queue, for the
        rounds both workers stamped after every job was in."""
        by_ts: dict[int, dict[tuple[str, str, str], dict[str, Any]]] = {}
        for m in read_topic(cfg, cfg.topics.snapshots):
            snap = codec.decode(m.value)
            # the queues' own snapshots; reason snapshots: tests/unit/test_snapshots.py
            if snap["timestamp"] >= after_ms and snap["reason"] is None:
                by_ts.setdefault(snap["timestamp"], {})[
                    (snap["worker"], snap["cluster"], snap["queue"])] = snap
        return {ts: list(s.values()) for ts, s in by_ts.items()
                if {w for w, _, _ in s} == {"w1", "w2"}}

    wait_for("a snapshot round of both workers", lambda: bool(rounds()), workers)
    ts, snaps = sorted(rounds().items())[0]
    owned = [set(next(s["partitions"] for s in snaps if s["worker"] == w)) for w in ("w1", "w2")]
    assert owned[0] and owned[1] and not owned[0] & owned[1]
    assert owned[0] | owned[1] == set(range(cfg.kafka.partitions))

    one = {(s["cluster"], s["queue"]): s for s in build_snapshots(
        (summarize(d) for d in expected.docs.values()), ts / 1000, "one", range(4), interval)
        if s["reason"] is None}
    assert {(s["cluster"], s["queue"]) for s in snaps} == set(one)
    for (cluster, queue), want in one.items():
        parts = [s for s in snaps if (s["cluster"], s["queue"]) == (cluster, queue)]
        for f in _ADDITIVE:
            assert sum(s[f] for s in parts) == pytest.approx(want[f]), (cluster, queue, f)
        assert max(s["oldest_pending_age_s"] for s in parts) == pytest.approx(
            want["oldest_pending_age_s"])
    assert one[("flux-a", "batch")]["pending_jobs"] > 0 and len(one) >= 4

    # the job query: either worker answers for every job, the owner's table is the source
    for key in sorted(expected.docs)[::40]:
        cluster, job_id = key.split(":")
        for w in workers:
            status, body = get_job(w.web_port, cluster, job_id)
            assert status == 200, (w.name, key, body)
            assert body == json.loads(json.dumps(expected.docs[key])), (w.name, key)
    for w in workers:
        status, body = get_job(w.web_port, "flux-a", "12345")
        assert status == 404 and "unknown job" in body["error"]


def _split(workers: list[WorkerProcess]) -> bool:
    """Whether the workers' last snapshot rounds split every partition between them."""
    parts = [partitions_logged(w) for w in workers]
    if any(not p for p in parts):
        return False
    a, b = parts
    assert a is not None and b is not None
    return not a & b and a | b == {0, 1, 2, 3}


# -- 5. figures: throughput, memory ---------------------------------------------------


def test_throughput_of_one_worker(stack_cfg: Config, spawn: Callable[..., WorkerProcess]
                                  ) -> None:
    """Events/s of one worker on a generated workload of ~54,000 events (5,000 jobs),
    from its first output to its last; the result checked against the offline fold."""
    messages = generated(WorkloadSpec(seed=51, jobs=5000, start=START, time_scale=0.05,
                                        usage_interval_s=None))
    expected = offline(stack_cfg, messages)
    publish(stack_cfg, messages)
    worker = spawn(stack_cfg).start()
    wait_caught_up(stack_cfg, [worker])
    cpu = worker.cpu_s()
    worker.stop()
    events = read_topic(stack_cfg, stack_cfg.topics.events)
    span_s = (max(m.timestamp_ms for m in events) - min(m.timestamp_ms for m in events)) / 1000
    print(f"\n{len(messages)} raw records -> {len(events)} events in {span_s:.1f} s: "
          f"{len(events) / span_s:.0f} events/s (worker CPU {cpu:.1f} s)")
    assert set(event_ids(events)) == expected.event_ids
    got = latest_states(read_topic(stack_cfg, stack_cfg.topics.state))
    assert not diff_states(got, expected.docs), diff_states(got, expected.docs)


def pending_jobs(n: int) -> list[Raw]:
    """Submit records of ``n`` jobs that stay pending: half Flux journal submits, half
    Slurm pending squeue documents, cloned from generated ones with new job ids."""
    templates = submits_only(generated(WorkloadSpec(seed=61, jobs=40, start=START)))
    out = []
    for i in range(n):
        t = templates[i % len(templates)]
        assert t.record is not None
        doc = json.loads(t.record.payload)
        if t.record.scheduler == "flux":
            doc["id"] = (i + 1) << 24 | 7
            job_id = str(doc["id"])
        else:
            doc["jobs"][0]["job_id"] = 100_000 + i
            job_id = str(100_000 + i)
        key = f"{t.record.cluster}:{job_id}"
        out.append(Raw(key, RawRecord(t.record.cluster, t.record.scheduler, t.record.format,
                                      t.record.received_at, json.dumps(doc).encode(), key)))
    return out


def test_memory_with_100k_tracked_jobs(stack_cfg: Config, spawn: Callable[..., WorkerProcess]
                                       ) -> None:
    """Resident memory of one worker holding 100,000 pending jobs in its table."""
    n = 100_000
    messages = pending_jobs(n)
    worker = spawn(stack_cfg).start()
    wait_for("the worker's partitions", lambda: partitions_logged(worker) is not None or
             bool(grep_log(worker, r"Worker\]: Ready")), [worker])
    idle = worker.rss()
    publish(stack_cfg, messages)
    wait_caught_up(stack_cfg, [worker], guard_s=600)
    rss = worker.rss()
    store = sum(f.stat().st_size for f in Path(worker.cfg.worker.store_dir).rglob("*")
                if f.is_file())
    worker.stop()
    states = latest_states(read_topic(stack_cfg, stack_cfg.topics.state))
    print(f"\nworker RSS: {idle / 2**20:.0f} MiB idle, {rss / 2**20:.0f} MiB with {n} jobs "
          f"tracked; RocksDB store {store / 2**20:.0f} MiB")
    assert len(states) == n and {d["state"] for d in states.values()} == {"pending"}
