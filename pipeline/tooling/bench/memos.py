"""One job posting thousands of memos must not stall the others.

Workflow tools post progress with ``flux job memo``: each call is one ``memo`` event of
the job, one journal response. A job's cost must not grow with such events, and the jobs
whose records come after them must not wait longer than behind as many ordinary events.

The phase starts the flow (a worker and the sink) once and feeds it twice, each time
publishing every record at once and timing from the publish to every job document at
its final revision and every event indexed (:func:`~pipeline.tooling.bench.flow.all_visible`):

1. *memos*: a workload's first Flux job, then ``memos`` memo events of that job, each its
   own journal response, then the workload's other jobs, published after the memos;
2. *ordinary*: a workload of other jobs with about as many canonical events in all.

The memos cost no more than ordinary events when (1) takes no longer than (2) for as many
events. The documents of both are then compared with the offline fold.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from pathlib import Path

from elasticsearch import Elasticsearch
from rich.console import Console

from pipeline.kafka.topics import ensure_topics
from pipeline.replay.readback import job_documents, jobs_alias, refresh
from pipeline.runtime.config import Config
from pipeline.tooling.bench.feed import (
    Feed,
    build_feed,
    expected_documents,
    feed_of,
    publish_all,
    workload_spec,
)
from pipeline.tooling.bench.flow import DocCheck, all_visible, check_documents
from pipeline.tooling.bench.rss import Flow, flow
from pipeline.tooling.demo import wait_ready
from pipeline.tooling.workload import GeneratedRecord, Workload, WorkloadSpec

__all__ = ["MemoResult", "memo_feed", "run_memos"]

#: jobs of the memo workload besides the job with the memos
OTHER_JOBS = 100


@dataclass
class MemoResult:
    memos: int
    #: the memo feed: the memos and the other jobs' events
    memo_events: int
    memo_jobs: int
    memo_s: float
    ordinary_events: int
    ordinary_jobs: int
    ordinary_s: float
    #: worker CPU seconds of each feed
    memo_worker_cpu_s: float
    ordinary_worker_cpu_s: float
    check: DocCheck

    @property
    def ratio(self) -> float:
        """Seconds per event of the memo feed over the ordinary feed's (≤ 1: no stall)."""
        return (self.memo_s / self.memo_events) / (self.ordinary_s / self.ordinary_events)


def memo_records(job: GeneratedRecord, memos: int) -> list[GeneratedRecord]:
    """``memos`` journal responses of one ``memo`` event each, for the Flux job whose
    first record (its submit) is ``job``."""
    first = json.loads(job.payload)
    t0 = float(first["events"][0]["timestamp"])
    out = []
    for i in range(memos):
        # distinct timestamps: an event's id is made of its job, name and time
        t = t0 + (i + 1) * 1e-5
        payload = {"id": first["id"], "events": [
            {"timestamp": t, "name": "memo", "context": {"progress": f"step {i + 1} of {memos}"}}]}
        out.append(replace(job, time=job.time + (i + 1) * 1e-5,
                           payload=json.dumps(payload, separators=(",", ":")).encode()))
    return out


def memo_feed(spec: WorkloadSpec, memos: int) -> tuple[Feed, str]:
    """The memo feed of ``spec``'s workload and the key of the job with the memos."""
    workload = Workload(spec)
    records = list(workload.records())
    at, job = next((i, r) for i, r in enumerate(records) if r.format == "flux-journal")
    records[at + 1:at + 1] = memo_records(job, memos)
    return feed_of(spec, records, workload.truth), job.key


def run_memos(cfg: Config, es: Elasticsearch, memos: int, seed: int, logs: Path, *,
              timeout: float, console: Console) -> MemoResult:
    start = float(int(time.time()))
    memo_spec = workload_spec(seed, OTHER_JOBS + 1, 1000.0, 0.05, start=start)
    with console.status(f"memos: building a job with {memos} memos and {OTHER_JOBS} others"):
        mfeed, _ = memo_feed(memo_spec, memos)
        others = mfeed.total_events - memos
        jobs = max(round(mfeed.total_events / (others / mfeed.jobs)), 1)
        # its ids after the memo workload's (Flux ids grow with the millisecond, Slurm's
        # 10 per second of submit time)
        ofeed = build_feed(workload_spec(seed + 1, jobs, 1000.0, 0.05,
                                         start=start + 10 * (OTHER_JOBS + jobs)))
    ensure_topics(cfg)
    with flow(cfg, logs) as f:
        with console.status("memos: waiting for the worker and the sink to join"):
            wait_ready(cfg, f.children, f.groups)
        with console.status(f"memos: {memos} memos of one job, then {mfeed.jobs - 1} jobs"):
            memo_s, memo_cpu = _timed(cfg, es, f, mfeed, [mfeed], timeout)
        with console.status(f"memos: {ofeed.total_events} ordinary events of {ofeed.jobs} jobs"):
            ordinary_s, ordinary_cpu = _timed(cfg, es, f, ofeed, [mfeed, ofeed], timeout)
    refresh(es, f"{cfg.elasticsearch.index_prefix}*")
    expected = {**expected_documents(cfg, mfeed), **expected_documents(cfg, ofeed)}
    check = check_documents(expected, list(job_documents(es, jobs_alias(cfg))))
    return MemoResult(memos, mfeed.total_events, mfeed.jobs, memo_s, ofeed.total_events,
                      ofeed.jobs, ordinary_s, memo_cpu, ordinary_cpu, check)


def _timed(cfg: Config, es: Elasticsearch, f: Flow, feed: Feed, published: list[Feed],
           timeout: float) -> tuple[float, float]:
    """Publish ``feed`` and wait for ``published`` (every feed so far) to be visible:
    seconds, worker CPU seconds."""
    f.rss.sample()
    cpu0, t0 = f.rss.cpu_s.get("worker-0", 0.0), time.monotonic()
    publish_all(cfg, feed.records)
    last = all_visible(es, cfg, published, f, timeout)
    f.rss.sample()
    return last - t0, f.rss.cpu_s.get("worker-0", 0.0) - cpu0
