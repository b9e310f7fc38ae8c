"""A job array submitted at once while the live feed runs (issue 35, the ``burst`` phase).

With the worker and the sink running and idle, the live feed (the latency phase's
workload) is published at ``rate`` canonical events/s in a thread, its sampled jobs
watched by the latency phase's probe (:class:`pipeline.tooling.bench.flow.Probe`). After
:data:`LEAD_S` seconds the array's records
(:func:`pipeline.tooling.workload_burst.burst_records`) are published at once, as fast as
the producer takes them, from a producer made beforehand. Measured:

* **all searchable**: from the moment the first array record is handed to the producer
  to the moment Elasticsearch *searches* every task's document at its final revision.
  The arrays have clusters of their own, so one ``size: 0`` search per probe interval
  (:data:`~pipeline.tooling.bench.flow.PROBE_S`: the figure is late by at most that)
  counts each array's documents and sums their ``revision``: revisions only grow, so the
  offline fold's count and sum mean every task is final (the e2e phase's test, per
  array; polling 10,000 ids would be the probe's cost ten thousand times over). Each
  array's own time is kept too (both are published at once: one's time includes the
  other's load).
* **the live feed meanwhile**: the latency of the sampled live records *published*
  between the array's first record and the last task searchable, p50/p99 as the latency
  phase's; the lead's records before it, for comparison. The live feed is stopped
  :data:`TAIL_S` after the window, then the probe waits for every sampled record sent.

``--burst-scheduler both`` (the default) splits the tasks half each rather than sending
an array of them to each scheduler: the bound is stated for one array of 10,000 tasks, and
a site's burst comes from its one scheduler, so the burst keeps that size while both
edges' records go through; ``flux`` is the heaviest per task (six records against about
two), and the worst case of the bound.

Afterwards the tasks' documents are read back and compared, field by field, with the
offline fold as the sink indexes it (:func:`pipeline.tooling.bench.flow.check_documents`):
a fast run with wrong documents does not count.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from elasticsearch import ApiError, Elasticsearch
from rich.console import Console

from pipeline.kafka.topics import ensure_topics
from pipeline.replay.readback import job_documents, jobs_alias, not_yet, refresh
from pipeline.runtime.config import Config
from pipeline.runtime.errors import ServiceError
from pipeline.tooling.bench.feed import Feed, expected_documents, feed_of, publish_paced
from pipeline.tooling.bench.flow import (
    PROBE_S,
    DocCheck,
    Probe,
    check_documents,
    index_writes,
    quantile,
    sampled,
)
from pipeline.tooling.bench.rss import flow, mib
from pipeline.tooling.demo import RawPublisher, wait_ready
from pipeline.tooling.workload import WorkloadSpec
from pipeline.tooling.workload_burst import burst_records

__all__ = ["BURST_CLUSTERS", "LEAD_S", "LIVE_S", "BurstResult", "array_targets", "arrays_final",
           "as_details", "burst_feed", "in_window", "run_burst"]

#: the arrays' clusters (the live feed's are ``bench-flux`` and ``bench-slurm``)
BURST_CLUSTERS = ("burst-flux", "burst-slurm")
#: live feed alone before the array
LEAD_S = 5.0
#: how long the live feed can run in all: the lead, the burst, and room for a slow one
LIVE_S = 75.0
#: the live feed goes on this long after the window, so the window's end is not its end
TAIL_S = 2.0


@dataclass
class BurstResult:
    scheduler: str
    #: cluster -> tasks of its array
    tasks: dict[str, int]
    records: int
    events: int
    #: the array handed to the producer and flushed
    publish_s: float
    #: first array record -> every task searchable at its final revision (None: timed out)
    all_searchable_s: float | None
    #: cluster -> first array record -> that array's tasks all searchable
    array_searchable_s: dict[str, float | None]
    rate_target: float
    rate_achieved: float
    #: the live feed's sampled records published in the window, seen arrive
    live_samples: int
    live_p50_s: float | None
    live_p99_s: float | None
    live_max_s: float | None
    #: the same for the lead (live feed alone)
    lead_samples: int
    lead_p99_s: float | None
    #: sampled live records never seen arrive
    live_unobserved: int
    #: share of one core each process used in the window
    cpu_share: dict[str, float]
    rss_peak_mib: dict[str, float | None]
    writes: dict[str, int]
    check: DocCheck
    notes: list[str] = field(default_factory=list)


def burst_feed(tasks: int, scheduler: str, t0: float) -> Feed:
    """The array(s) of the phase, folded offline."""
    records = burst_records(tasks, scheduler, t0, clusters=BURST_CLUSTERS)
    return feed_of(WorkloadSpec(seed=0, jobs=tasks, start=t0, flux_clusters=BURST_CLUSTERS[:1],
                                slurm_clusters=BURST_CLUSTERS[1:]), records, {})


def array_targets(feed: Feed) -> dict[str, tuple[int, int]]:
    """Cluster -> (documents, sum of their revisions) once every task is final."""
    out: dict[str, tuple[int, int]] = {}
    for doc in feed.documents.values():
        docs, revisions = out.get(doc["cluster"], (0, 0))
        out[doc["cluster"]] = (docs + 1, revisions + int(doc["revision"]))
    return out


def arrays_final(buckets: Iterable[Mapping[str, Any]],
                 want: Mapping[str, tuple[int, int]]) -> set[str]:
    """The clusters whose documents all stand at their final revision, from a ``terms``
    aggregation on ``cluster`` with a ``sum`` of ``revision`` in each bucket."""
    got = {b["key"]: (int(b["doc_count"]), int(b["rev"]["value"])) for b in buckets}
    return {cluster for cluster, target in want.items() if got.get(cluster) == target}


def in_window(samples: Iterable[tuple[float, float]], start: float, end: float
              ) -> list[float]:
    """The latencies, sorted, of the records published from ``start`` to ``end``."""
    return sorted(lat for published, lat in samples if start <= published <= end)


def _searchable(es: Elasticsearch, alias: str, want: Mapping[str, tuple[int, int]],
                started: float, deadline: float, check: Callable[[], None]
                ) -> dict[str, float | None]:
    """Cluster -> seconds from ``started`` until its array is final (None past the
    deadline)."""
    done: dict[str, float | None] = {}
    clusters = sorted(want)
    while time.monotonic() < deadline:
        check()
        try:
            resp = es.search(index=alias, size=0, query={"terms": {"cluster": clusters}},
                             aggs={"by": {"terms": {"field": "cluster", "size": len(clusters)},
                                          "aggs": {"rev": {"sum": {"field": "revision"}}}}})
        except ApiError as exc:
            if not not_yet(exc):
                raise
        else:
            now = time.monotonic()
            for cluster in arrays_final(resp["aggregations"]["by"]["buckets"], want):
                done.setdefault(cluster, now - started)
            if len(done) == len(want):
                return done
        time.sleep(PROBE_S)
    return {cluster: done.get(cluster) for cluster in clusters}


def run_burst(cfg: Config, es: Elasticsearch, live: Feed, burst: Feed, logs: Path, *,
              scheduler: str, rate: float, sample_every: int, timeout: float,
              console: Console) -> BurstResult:
    ensure_topics(cfg)
    alias = jobs_alias(cfg)
    probe = Probe(es, alias)
    want = array_targets(burst)
    notes: list[str] = []
    with flow(cfg, logs) as f:
        with console.status("burst: waiting for the worker and the sink to join"):
            wait_ready(cfg, f.children, f.groups)
        keys = [r.key for r in live.records]
        chosen = {k for k in set(keys) if sampled(k, sample_every)}

        def sent(i: int, when: float) -> None:
            if keys[i] in chosen:
                probe.expect(keys[i], live.revisions[i], when)

        stop = threading.Event()
        achieved: list[float] = []
        live_error: list[BaseException] = []

        def publish_live() -> None:
            try:
                achieved.append(publish_paced(cfg, live, rate, sent, stop))
            except BaseException as exc:  # noqa: BLE001 -- raised in the main thread
                live_error.append(exc)

        publisher = RawPublisher(cfg)  # made before the clock starts
        thread = threading.Thread(target=publish_live, name="bench-live", daemon=True)
        probe.start()
        live_started = time.monotonic()
        thread.start()
        try:
            with console.status(f"burst: live feed at {rate:g} events/s for {LEAD_S:g} s"):
                while time.monotonic() < live_started + LEAD_S:
                    f.check()
                    time.sleep(PROBE_S)
            f.rss.sample()
            cpu0 = dict(f.rss.cpu_s)
            with console.status(f"burst: publishing {len(burst.records)} records of "
                                f"{burst.jobs} tasks at once"):
                first = time.monotonic()
                for rec in burst.records:
                    publisher.send(rec)
                publisher.flush()
                publish_s = time.monotonic() - first
            with console.status(f"burst: waiting for {burst.jobs} task documents"):
                per_array = _searchable(es, alias, want, first, first + timeout, f.check)
            end = time.monotonic()
            f.rss.sample()
            share = {k: round((v - cpu0.get(k, 0.0)) / (end - first), 3)
                     for k, v in f.rss.cpu_s.items()}
            if not thread.is_alive():
                notes.append("the live feed ended before the window did")
            time.sleep(max(0.0, end + TAIL_S - time.monotonic()))
            stop.set()
            thread.join(timeout=30)
            with console.status("burst: waiting for the last sampled live documents"):
                probe.wait_all(f.check, timeout)
        finally:
            stop.set()
            probe.stop()
        peak = {k: mib(v) for k, v in f.rss.peak.items()}
    if live_error:
        raise ServiceError(f"the live feed failed: {live_error[0]}")
    if probe.error and not probe.samples:
        raise ServiceError(f"latency probe failed: {probe.error}")
    times = [s for s in per_array.values() if s is not None]
    all_s = max(times) if len(times) == len(per_array) else None
    window = in_window(probe.samples, first, end)
    lead = in_window(probe.samples, live_started, first)
    refresh(es, f"{cfg.elasticsearch.index_prefix}*")
    clusters = set(want)
    indexed = [doc for doc in job_documents(es, alias) if doc.get("cluster") in clusters]
    check = check_documents(expected_documents(cfg, burst), indexed)
    tasks = {cluster: docs for cluster, (docs, _) in want.items()}
    return BurstResult(
        scheduler=scheduler, tasks=tasks, records=len(burst.records),
        events=burst.total_events, publish_s=round(publish_s, 3),
        all_searchable_s=all_s, array_searchable_s=per_array, rate_target=rate,
        rate_achieved=achieved[0] if achieved else 0.0, live_samples=len(window),
        live_p50_s=quantile(window, 0.5), live_p99_s=quantile(window, 0.99),
        live_max_s=window[-1] if window else None, lead_samples=len(lead),
        lead_p99_s=quantile(lead, 0.99), live_unobserved=probe.outstanding(),
        cpu_share=share, rss_peak_mib=peak,
        writes=index_writes(es, cfg.elasticsearch.index_prefix), check=check, notes=notes)


def as_details(res: BurstResult) -> dict[str, Any]:
    return {**asdict(res), "check": res.check.as_dict()}
