"""Records that stopped the stream, through a real worker, sink and Elasticsearch.

Each ends as a document or as a DLQ record with its reason, the worker and the sink stay
up (and up again after a restart, on the same records), ordinary jobs published after
them are searchable, and the worker's memory stays under 512 MiB throughout:

* one Flux job given 100,000 urgency changes and 50,000 exceptions by its owner (its
  state and changelog record outgrew Kafka's message size: the worker crashed on every
  restart);
* a 1,000-character queue on a 1,000-character cluster name (document and snapshot
  ``_id`` over Elasticsearch's 512 bytes: the whole bulk request refused, the sink down
  for good);
* a 40 KB exception type chosen by the job's owner (over the keyword term limit: every
  later state of the job refused);
* a Slurm node list zero-padded to 10,000 digits (7.8 GB of worker memory);
* Slurm job id 65534 (refused as a 16-bit sentinel).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from elasticsearch import Elasticsearch
from topic_reads import read_topic
from workers import Raw, publish

from pipeline.core.model import RawRecord
from pipeline.replay.readback import job_documents, jobs_alias, refresh
from pipeline.runtime.children import Child, free_port
from pipeline.runtime.config import Config

NOW = time.time()
JOBCOMP = json.loads((Path(__file__).resolve().parents[1]
                      / "data/slurm/jobcomp_25.05_kafka_finish.json").read_text())
CLUSTER = "pp"
LONG = "q" * 1000
LONG_CLUSTER = "c" * 1000
MEMORY_BOUND = 512 * 1024 * 1024
GUARD_S = 300.0


def flux(job: int, events: list[dict[str, Any]], *, cluster: str = CLUSTER,
         jobspec: dict[str, Any] | None = None) -> Raw:
    body: dict[str, Any] = {"id": job, "events": events}
    if jobspec is not None:
        body["jobspec"] = jobspec
    record = RawRecord(cluster=cluster, scheduler="flux", format="flux-journal",
                       received_at=NOW, payload=json.dumps(body).encode())
    return Raw(f"{cluster}:{job}", record)


def life(t: float, *, finish: bool = True) -> list[dict[str, Any]]:
    events = [{"timestamp": t, "name": "submit",
               "context": {"userid": 1001, "urgency": 16, "flags": 0, "version": 1}},
              {"timestamp": t + 0.1, "name": "validate"},
              {"timestamp": t + 0.2, "name": "depend"},
              {"timestamp": t + 0.3, "name": "priority", "context": {"priority": 16}}]
    if finish:
        events += [{"timestamp": t + 60, "name": "exception",
                    "context": {"type": "cancel", "severity": 0, "userid": 1001,
                                "note": ""}},
                   {"timestamp": t + 61, "name": "clean"}]
    return events


def jobcomp(job: int, **changes: Any) -> Raw:
    rec = {**JOBCOMP, "jobid": job, "cluster": CLUSTER, **changes}
    record = RawRecord(cluster=CLUSTER, scheduler="slurm", format="slurm-jobcomp",
                       received_at=NOW, payload=json.dumps(rec).encode())
    return Raw(f"{CLUSTER}:{job}", record)


def flooded_job(job: int) -> list[Raw]:
    """A pending job whose owner changes its urgency 100,000 times and raises 50,000
    non-fatal exceptions on it, in journal records of 5,000 events, then cancels it."""
    t0 = NOW - 7200
    records = [flux(job, life(t0, finish=False))]
    floods = [{"timestamp": t0 + 1 + i * 0.01, "name": "urgency",
               "context": {"userid": 1001, "urgency": i % 31 + 1}} for i in range(100_000)]
    floods += [{"timestamp": t0 + 1 + i * 0.02 + 0.005, "name": "exception",
                "context": {"type": "user", "severity": 1, "userid": 1001,
                            "note": f"raise {i}"}} for i in range(50_000)]
    floods.sort(key=lambda e: e["timestamp"])
    for i in range(0, len(floods), 5000):
        records.append(flux(job, floods[i:i + 5000]))
    records.append(flux(job, [{"timestamp": t0 + 3000, "name": "exception", "context": {
        "type": "cancel", "severity": 0, "userid": 1001, "note": ""}},
        {"timestamp": t0 + 3001, "name": "clean"}]))
    return records


class PeakMemory:
    """The largest resident memory of a process, sampled every 0.2 s in a thread."""

    def __init__(self, pid: int) -> None:
        self.peak = 0
        self._proc = psutil.Process(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            try:
                self.peak = max(self.peak, self._proc.memory_info().rss)
            except psutil.Error:
                return

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


@pytest.fixture
def flow(stack_cfg: Config, tmp_path: Path) -> Iterator[list[Child]]:
    cfg = stack_cfg.replace(worker={"web_port": free_port(), "snapshot_interval_s": 2.0})
    children = [Child("worker", cfg, ["worker", "--name", "pp"], tmp_path / "worker.log"),
                Child("sink", cfg, ["sink"], tmp_path / "sink.log")]
    for child in children:
        child.start()
    yield children
    for child in children:
        child.stop()


def documents(es: Elasticsearch, cfg: Config) -> dict[tuple[str, str], dict[str, Any]]:
    try:
        refresh(es, jobs_alias(cfg))
    except Exception:  # noqa: BLE001 - not created yet: nothing searchable
        return {}
    return {(d["cluster"], d["job_id"]): d for d in job_documents(es, jobs_alias(cfg))}


def wait_for(what: str, children: list[Child], missing: Any) -> float:
    """Seconds until ``missing()`` is empty; fails if a child exits or after the guard,
    saying what is still missing."""
    started = time.monotonic()
    while left := missing():
        for child in children:
            assert child.alive(), f"{child.name} exited: {child.log.read_text()[-4000:]}"
        assert time.monotonic() - started < GUARD_S, f"timed out waiting for {what}: {left}"
        time.sleep(0.5)
    return time.monotonic() - started


def test_poison_pills_end_as_documents_or_dlq_records_and_the_stream_goes_on(
        stack_cfg: Config, es: Elasticsearch, flow: list[Child]) -> None:
    cfg = stack_cfg
    worker = flow[0]
    assert worker.pid is not None
    memory = PeakMemory(worker.pid)
    pills = [
        *flooded_job(1001),
        flux(1002, life(NOW - 600), cluster=LONG_CLUSTER, jobspec={
            "version": 1, "resources": [{"type": "slot", "count": 1, "label": "task",
                                         "with": [{"type": "core", "count": 1}]}],
            "tasks": [{"command": ["true"], "slot": "task", "count": {"per_slot": 1}}],
            "attributes": {"system": {"queue": LONG, "duration": 60}}}),
        flux(1003, [*life(NOW - 500, finish=False),
                    {"timestamp": NOW - 400, "name": "exception", "context": {
                        "type": "t" * 40_960, "severity": 0, "userid": 1001, "note": ""}},
                    {"timestamp": NOW - 399, "name": "clean"}]),
        jobcomp(1004, nodes="n[" + "0" * 9_999 + "1-2]"),
        jobcomp(65534),
    ]
    publish(cfg, pills)
    published = time.monotonic()
    ordinary = [jobcomp(2000 + i, partition="batch") for i in range(20)]
    publish(cfg, ordinary)

    def ordinary_missing() -> list[str]:
        docs = documents(es, cfg)
        return [str(2000 + i) for i in range(20) if (CLUSTER, str(2000 + i)) not in docs]

    took = wait_for("the ordinary jobs to be searchable", flow, ordinary_missing)
    print(f"ordinary jobs searchable {took:.1f} s after they were published, "
          f"{time.monotonic() - published:.1f} s after the poison pills")

    def unsettled() -> list[str]:
        docs = documents(es, cfg)
        flooded = docs.get((CLUSTER, "1001"), {})
        left = [f"{c[:8]}:{j}" for c, j in ((LONG_CLUSTER, "1002"), (CLUSTER, "1003"),
                                            (CLUSTER, "65534")) if (c, j) not in docs]
        if flooded.get("state") != "done":
            left.append(f"1001 is {flooded.get('state')}, revision {flooded.get('revision')}")
        return left

    wait_for("the poison pills' documents", flow, unsettled)
    docs = documents(es, cfg)
    flooded = docs[(CLUSTER, "1001")]
    assert flooded["result"] == "cancelled"
    assert flooded["exceptions_dropped"] > 49_000 and flooded["events_dropped"] > 149_000
    assert docs[(LONG_CLUSTER, "1002")]["queue"] == LONG
    assert docs[(CLUSTER, "1003")]["result"] == "exception"
    assert docs[(CLUSTER, "65534")]["state"] == "done"
    dlq = read_topic(cfg, cfg.topics.dlq)
    bomb = [m for m in dlq if m.key == f"{CLUSTER}:1004".encode()]
    assert (CLUSTER, "1004") in docs or (
        bomb and bomb[0].headers["stage"] == b"normalize" and bomb[0].headers["reason"]), dlq
    # a 40 KB type is kept whole in the events index
    events = es.search(index=f"{cfg.elasticsearch.index_prefix}hpc-job-events",
                       query={"term": {"job_id": "1003"}}, size=100)["hits"]["hits"]
    assert any(len(h["_source"].get("context", {}).get("type", "")) == 40_960 for h in events)
    # the long queue's snapshots are indexed
    snaps = es.search(index=f"{cfg.elasticsearch.index_prefix}hpc-queue-snapshots",
                      query={"term": {"queue": LONG}}, size=1)["hits"]["total"]
    assert snaps["value"] > 0
    peak = memory.stop()
    print(f"worker peak RSS {peak / 2**20:.1f} MiB")
    assert peak < MEMORY_BOUND

    # a restart on the same records does not crash again; the next job is searchable
    for child in flow:
        child.stop()
        child.start()
    publish(cfg, [jobcomp(3000)])
    wait_for("a job after the restart", flow,
             lambda: [] if (CLUSTER, "3000") in documents(es, cfg) else ["3000"])
