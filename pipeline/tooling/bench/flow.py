"""The whole flow under measurement: end-to-end throughput and latency.

**Throughput** (:func:`run_e2e`). The raw topic is filled with the workload first; then the
worker(s) and the sink start. The clock starts when the worker folds its first event, found
afterwards by that record's Kafka timestamp, with each process's CPU at that moment from
samples taken every 50 ms (:mod:`pipeline.tooling.bench.window`: why not the first record
on the events topic, and the errors), so process start-up and the group join are reported
apart and not charged to throughput;
it stops when Elasticsearch *searches* every job document at its final revision: the
number of documents equals the number of jobs and the sum of their ``revision`` fields
the sum of the offline fold's (revisions only grow, so equal sums mean every document is
final). That is polled every 100 ms with one ``size: 0`` search, so the figure is late by
at most 0.1 s. Afterwards the documents are read back and compared, field by field, with
the offline fold as the sink would index it.

**Latency** (:func:`run_latency`). With the worker and the sink running and idle, the
workload is published at a set rate of canonical events. One job in ``sample_every``
(by a hash of its key) is sampled: for each of its records the publish time and the
revision the job's document has once the record is folded in. A probe thread searches the
sampled jobs that have records outstanding by id, every 100 ms (one small ``ids`` query,
``_source: revision``: nothing the flow waits for), and takes a record as arrived when the
searchable document's revision reaches the record's. Latency = that moment - the publish
moment, so it includes Kafka, both worker stages, the sink's batching and Elasticsearch's
refresh, and is late by at most the 0.1 s probe interval.

**Writes per job**: the primaries' ``indexing.index_total`` (and ``delete_total``) of the
phase's own indices, per index family, divided by the jobs.
"""

from __future__ import annotations

import statistics
import threading
import time
import zlib
from collections import defaultdict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient
from elasticsearch import ApiError, Elasticsearch
from rich.console import Console

from pipeline.fold import doc_id
from pipeline.kafka.positions import Positions
from pipeline.kafka.topics import ensure_topics
from pipeline.replay.readback import job_documents, jobs_alias, not_yet, refresh
from pipeline.runtime.config import Config
from pipeline.runtime.errors import ServiceError
from pipeline.sink.names import Family, alias_name
from pipeline.tooling.bench.feed import Feed, expected_documents, publish_paced
from pipeline.tooling.bench.rss import Flow, flow, mib
from pipeline.tooling.bench.window import (
    STAMP_RESOLUTION_S,
    Clock,
    CpuHistory,
    WindowStart,
    baseline_at,
    first_stamp_ms,
)
from pipeline.tooling.demo import wait_ready

__all__ = ["E2EResult", "LatencyResult", "Probe", "all_visible", "index_writes", "quantile",
           "run_e2e", "run_latency", "sampled"]

PROBE_S = 0.1
_FIRST_OUTPUT_POLL_S = 0.05


def index_writes(es: Elasticsearch, prefix: str) -> dict[str, int]:
    """Index (and delete) operations done so far on the primaries of each family's indices
    under ``prefix``."""
    try:
        stats = es.indices.stats(index=f"{prefix}*", metric="indexing",
                                 expand_wildcards="all")
    except ApiError as exc:
        if not not_yet(exc):
            raise
        return {}
    out: dict[str, int] = defaultdict(int)
    for name, body in stats.get("indices", {}).items():
        indexing = body["primaries"]["indexing"]
        for family in Family:
            if name.startswith(f"{prefix}{family.value}-"):
                out[family.value] += int(indexing["index_total"]) + int(indexing["delete_total"])
    return dict(out)


@dataclass
class DocCheck:
    """The e2e documents against the offline fold."""

    expected: int = 0
    found: int = 0
    equal: int = 0
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    #: (document id, field, indexed value, offline value), a few
    differences: list[tuple[str, str, Any, Any]] = field(default_factory=list)
    #: ids of the indexed documents that differ from their offline one in some field
    different: list[str] = field(default_factory=list)
    #: field -> indexed documents in which it differs
    field_errors: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.equal == self.expected == self.found

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "expected": self.expected, "found": self.found,
                "equal": self.equal, "missing": self.missing[:10],
                "unexpected": self.unexpected[:10],
                "differences": [list(d) for d in self.differences[:10]],
                "field_errors": dict(self.field_errors)}


def check_documents(expected: Mapping[str, Mapping[str, Any]],
                    indexed: list[Mapping[str, Any]]) -> DocCheck:
    out = DocCheck(expected=len(expected), found=len(indexed))
    seen: set[str] = set()
    for doc in indexed:
        key = doc_id(doc)
        seen.add(key)
        want = expected.get(key)
        if want is None:
            out.unexpected.append(key)
            continue
        diff = [f for f in sorted(set(want) | set(doc)) if doc.get(f) != want.get(f)]
        if not diff:
            out.equal += 1
        else:
            out.different.append(key)
        for name in diff:
            out.field_errors[name] = out.field_errors.get(name, 0) + 1
        for name in diff[:3]:
            if len(out.differences) < 10:
                out.differences.append((key, name, doc.get(name), want.get(name)))
    out.missing = sorted(set(expected) - seen)
    return out


@dataclass
class E2EResult:
    workers: int
    records: int
    events: int
    jobs: int
    #: child processes spawned -> the window's start (the worker's first event)
    startup_s: float
    #: the window: the worker's first event -> the last job document searchable
    seconds: float
    writes: dict[str, int]
    rss_peak_mib: dict[str, float | None]
    rss_end_mib: dict[str, float | None]
    #: CPU seconds each process used in the window
    cpu_s: dict[str, float]
    #: of which the JIT compiler threads of the JVMs (Kafka, Elasticsearch)
    jit_cpu_s: dict[str, float]
    check: DocCheck
    #: event documents indexed: one per distinct event id (a job polled twice states some
    #: of its events twice, in ``events``)
    event_documents: int
    #: how the window's start was found, and its errors
    window: WindowStart

    @property
    def events_per_s(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0


def _first_output(cfg: Config, f: Flow, timeout: float, history: CpuHistory) -> float:
    """When the first record shows on the events topic; ``history`` sampled at each look,
    the last one after it."""
    positions = Positions(AdminClient(cfg.librdkafka()))
    outputs = [cfg.topics.events]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        f.check()
        try:
            seen = sum(positions.ends(outputs).values()) > 0
        except ServiceError:
            seen = False  # the worker is creating the topic: no leader for a moment
        now = time.monotonic()
        history.sample()
        if seen:
            return now
        time.sleep(_FIRST_OUTPUT_POLL_S)
    raise ServiceError(f"the worker produced nothing within {timeout:.0f} s (log "
                       f"{f.workers[0].log})")


def all_visible(es: Elasticsearch, cfg: Config, feeds: Sequence[Feed], f: Flow,
                timeout: float) -> float:
    """When every job document of ``feeds`` (of distinct jobs, all published to ``cfg``'s
    raw topic) stands at its final revision and every event is indexed: the sink writes
    states and events from two topics, and one may be ahead of the other (the flow stops
    right after, so an event not yet written would never be)."""
    jobs = jobs_alias(cfg)
    events = alias_name(cfg.elasticsearch.index_prefix, Family.EVENTS)
    want = (sum(feed.jobs for feed in feeds), sum(feed.revision_sum for feed in feeds),
            sum(feed.distinct_events for feed in feeds))
    deadline = time.monotonic() + timeout
    got: tuple[int, int, int] = (0, 0, 0)
    while time.monotonic() < deadline:
        f.check()
        try:
            resp = es.search(index=jobs, size=0, track_total_hits=True,
                             aggs={"rev": {"sum": {"field": "revision"}}})
            got = (int(resp["hits"]["total"]["value"]),
                   int(resp["aggregations"]["rev"]["value"]), got[2])
            if got[:2] == want[:2]:
                got = (*got[:2], int(es.count(index=events)["count"]))
        except ApiError as exc:
            if not not_yet(exc):
                raise
        if got == want:
            return time.monotonic()
        time.sleep(PROBE_S)
    raise ServiceError(f"after {timeout:.0f} s, {got[0]} of {want[0]} job documents are "
                       f"searchable with revision sum {got[1]} of {want[1]}, and "
                       f"{got[2]} of {want[2]} events")


def run_e2e(cfg: Config, es: Elasticsearch, feed: Feed, logs: Path, *, workers: int,
            timeout: float, console: Console) -> E2EResult:
    """The flow on ``cfg``'s raw topic, which holds ``feed`` already."""
    with flow(cfg, logs, workers=workers) as f:
        spawned = time.monotonic()
        clock = Clock.read()
        history = CpuHistory(f.rss)
        with console.status(f"e2e: starting {workers} worker(s) and the sink"):
            first_output = _first_output(cfg, f, timeout, history)
        with console.status(f"e2e: {feed.total_events} events -> {feed.jobs} job documents"):
            last = all_visible(es, cfg, [feed], f, timeout)
        f.rss.sample()
        cpu_end, jit_end = dict(f.rss.cpu_s), f.rss.jit_cpu_s()
        peak = {k: mib(v) for k, v in f.rss.peak.items()}
        end = {k: mib(v) for k, v in f.rss.last.items()}
    drift = abs(Clock.read().offset - clock.offset)
    # every event is on the topic now, the first of each partition among them
    start = clock.monotonic(first_stamp_ms(cfg, [cfg.topics.events]) / 1000)
    base = baseline_at(history.samples, start)
    cpu = {k: round(v - base.cpu_s.get(k, 0.0), 2) for k, v in cpu_end.items()}
    jit = {k: round(v - base.jit_cpu_s.get(k, 0.0), 2) for k, v in jit_end.items()}
    cpu_error = {k: round(v, 3) for k, v in base.error_s.items()}
    window = WindowStart(
        method="the worker's first event: the earliest CreateTime on the events topic",
        error_s=round(STAMP_RESOLUTION_S + clock.error + drift, 6),
        clock_drift_s=round(drift, 6),
        events_before_at_most=max(feed.events) if min(feed.events, default=0) else None,
        first_output_after_s=round(first_output - start, 3), cpu_error_s=cpu_error,
        cpu_error_share=(round(sum(cpu_error.values()) / sum(cpu.values()), 4)
                         if sum(cpu.values()) > 0 else None),
        cpu_sample_gap_s=round(base.gap_s, 3))
    refresh(es, f"{cfg.elasticsearch.index_prefix}*")
    writes = index_writes(es, cfg.elasticsearch.index_prefix)
    check = check_documents(expected_documents(cfg, feed),
                            list(job_documents(es, jobs_alias(cfg))))
    return E2EResult(workers, len(feed.records), feed.total_events, feed.jobs,
                     startup_s=start - spawned, seconds=last - start, writes=writes,
                     rss_peak_mib=peak, rss_end_mib=end, cpu_s=cpu, jit_cpu_s=jit,
                     check=check, event_documents=feed.distinct_events, window=window)


@dataclass
class LatencyResult:
    rate_target: float
    rate_achieved: float
    events: int
    jobs: int
    sampled_jobs: int
    samples: int
    unobserved: int
    p50_s: float | None
    p99_s: float | None
    max_s: float | None
    writes: dict[str, int]
    rss_peak_mib: dict[str, float | None]
    #: share of one core each process used while publishing (1.0 = a core all the time)
    cpu_share: dict[str, float]


class Probe:
    """Watches the sampled jobs' documents; see the module docstring."""

    def __init__(self, es: Elasticsearch, alias: str) -> None:
        self.es = es
        self.alias = alias
        self.pending: dict[str, deque[tuple[int, float]]] = {}
        self.latencies: list[float] = []
        #: (publish time, latency) of each record seen arrive, to cut a window out
        self.samples: list[tuple[float, float]] = []
        self.error = ""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="bench-probe", daemon=True)

    def expect(self, key: str, revision: int, published: float) -> None:
        with self._lock:
            self.pending.setdefault(key, deque()).append((revision, published))

    def outstanding(self) -> int:
        with self._lock:
            return sum(len(q) for q in self.pending.values())

    def wait_all(self, check: Callable[[], None], timeout: float) -> None:
        """Until every expected revision was seen, at most ``timeout`` s; ``check`` (the
        flow's: a child that died raises) between looks."""
        deadline = time.monotonic() + timeout
        while self.outstanding() and time.monotonic() < deadline:
            check()
            time.sleep(PROBE_S)

    def start(self) -> Probe:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.wait(PROBE_S):
            try:
                self.poll()
            except Exception as exc:  # noqa: BLE001 -- reported with the result
                self.error = f"{type(exc).__name__}: {exc}"

    def poll(self) -> None:
        with self._lock:
            ids = [k for k, q in self.pending.items() if q]
        if not ids:
            return
        try:
            resp = self.es.search(index=self.alias, query={"ids": {"values": ids}},
                                  size=len(ids), source=["revision"])
        except ApiError as exc:
            if not_yet(exc):
                return
            raise
        now = time.monotonic()
        with self._lock:
            for hit in resp["hits"]["hits"]:
                queue = self.pending.get(hit["_id"])
                revision = int(hit["_source"].get("revision", 0))
                while queue and queue[0][0] <= revision:
                    published = queue.popleft()[1]
                    self.latencies.append(now - published)
                    self.samples.append((published, now - published))


def quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=1000, method="inclusive")[round(q * 1000) - 1]


def sampled(key: str, every: int) -> bool:
    return zlib.crc32(key.encode()) % every == 0


def run_latency(cfg: Config, es: Elasticsearch, feed: Feed, logs: Path, *, rate: float,
                sample_every: int, timeout: float, console: Console) -> LatencyResult:
    ensure_topics(cfg)
    probe = Probe(es, jobs_alias(cfg))
    with flow(cfg, logs) as f:
        with console.status("latency: waiting for the worker and the sink to join"):
            wait_ready(cfg, f.children, f.groups)
        keys = [r.key for r in feed.records]
        chosen = {k for k in set(keys) if sampled(k, sample_every)}
        probe.start()

        def sent(i: int, when: float) -> None:
            if keys[i] in chosen:
                probe.expect(keys[i], feed.revisions[i], when)

        try:
            with console.status(f"latency: publishing {feed.total_events} events at "
                                f"{rate:g}/s"):
                f.rss.sample()
                cpu0, t0 = dict(f.rss.cpu_s), time.monotonic()
                achieved = publish_paced(cfg, feed, rate, sent)
                f.rss.sample()
                share = {k: round((v - cpu0.get(k, 0.0)) / (time.monotonic() - t0), 3)
                         for k, v in f.rss.cpu_s.items()}
            with console.status("latency: waiting for the last sampled documents"):
                probe.wait_all(f.check, timeout)
        finally:
            probe.stop()
        peak = {k: mib(v) for k, v in f.rss.peak.items()}
    if probe.error and not probe.latencies:
        raise ServiceError(f"latency probe failed: {probe.error}")
    refresh(es, f"{cfg.elasticsearch.index_prefix}*")
    lat = sorted(probe.latencies)
    return LatencyResult(
        rate_target=rate, rate_achieved=achieved, events=feed.total_events, jobs=feed.jobs,
        sampled_jobs=len(chosen), samples=len(lat), unobserved=probe.outstanding(),
        p50_s=quantile(lat, 0.5), p99_s=quantile(lat, 0.99), max_s=lat[-1] if lat else None,
        writes=index_writes(es, cfg.elasticsearch.index_prefix), rss_peak_mib=peak,
        cpu_share=share)
