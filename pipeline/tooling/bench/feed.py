"""The benchmark's input: a seeded synthetic workload, what it must turn into, and how it is
published.

A :class:`Feed` holds the raw records of a :class:`~pipeline.tooling.workload.Workload` in time
order with, per record, the canonical events it parses into and the revision its job's
document has once the record is folded in (records of a job are processed in order, so
that is the number of distinct events of the job up to and including the record); and the
job documents of the offline fold, in the form the sink indexes them. The e2e phase waits
for those documents, the latency phase for those revisions.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pipeline.codecs.codec import AvroCodec
from pipeline.core.anonymize import Anonymizer
from pipeline.core.enrich import Enricher
from pipeline.core.model import JobEvent, RawRecord
from pipeline.fold import JobFold, doc_id
from pipeline.parsers.normalize import normalize
from pipeline.runtime.config import Config
from pipeline.tooling.demo import RawPublisher
from pipeline.tooling.workload import GeneratedRecord, Workload, WorkloadSpec

__all__ = ["Feed", "build_feed", "expected_documents", "feed_of", "publish_all", "publish_paced",
           "raw_record", "workload_spec"]

#: canonical events per job of the synthetic workload (measured: 14.18 at seed 1 with 1,000
#: jobs), to turn an event rate into the workload's job arrival rate
EVENTS_PER_JOB = 14.2


def workload_spec(seed: int, jobs: int, event_rate: float, time_scale: float,
                  start: float | None = None) -> WorkloadSpec:
    """A workload whose jobs arrive as fast as ``event_rate`` canonical events/s needs.
    Without node samples or long jobs: the bench's figures (events per job, rates) are
    the scheduler events' own."""
    return WorkloadSpec(seed=seed, jobs=jobs, rate=max(event_rate / EVENTS_PER_JOB, 0.01),
                        time_scale=time_scale, flux_clusters=("bench-flux",),
                        slurm_clusters=("bench-slurm",),
                        start=float(int(time.time())) if start is None else start,
                        usage_interval_s=None, long_jobs=0)


def raw_record(rec: GeneratedRecord) -> RawRecord:
    """The raw record an edge would publish for a generated one (received at its own time,
    so a replay folds exactly what the live flow folded)."""
    return RawRecord(cluster=rec.cluster, scheduler=rec.scheduler,  # type: ignore[arg-type]
                     format=rec.format, received_at=rec.time, payload=rec.payload,
                     key=rec.key)


@dataclass(frozen=True)
class Feed:
    spec: WorkloadSpec
    records: Sequence[GeneratedRecord]
    #: canonical events of each record
    events: Sequence[int]
    #: the record's job document revision once the record is folded in
    revisions: Sequence[int]
    #: offline fold: document id -> job document (fold output, before enrichment)
    documents: Mapping[str, Mapping[str, Any]]
    truth: Mapping[str, Mapping[str, Any]]
    #: distinct event ids: the event documents the sink indexes
    distinct_events: int

    @property
    def total_events(self) -> int:
        return sum(self.events)

    @property
    def jobs(self) -> int:
        return len(self.documents)

    @property
    def revision_sum(self) -> int:
        """Sum of the final revisions of every job document (a cheap "all final" test)."""
        return sum(int(d["revision"]) for d in self.documents.values())


def build_feed(spec: WorkloadSpec) -> Feed:
    """Generate the workload and fold it offline."""
    workload = Workload(spec)
    return feed_of(spec, list(workload.records()), workload.truth)


def feed_of(spec: WorkloadSpec, records: Sequence[GeneratedRecord],
            truth: Mapping[str, Mapping[str, Any]]) -> Feed:
    """The feed of ``records`` (in publishing order), folded offline."""
    folds: dict[str, JobFold] = {}
    counts: list[int] = []
    revisions: list[int] = []
    event_ids: set[str] = set()
    for rec in records:
        evs: list[JobEvent] = normalize(raw_record(rec))
        counts.append(len(evs))
        event_ids.update(ev.event_id for ev in evs)
        jf = folds.get(rec.key)
        if jf is None:
            jf = folds[rec.key] = JobFold()
        for ev in evs:
            jf.add(ev)
        revisions.append(jf.revision)
    documents = {doc_id(d): d for jf in folds.values() for d in jf.documents()}
    return Feed(spec, records, counts, revisions, documents, truth,
                len(event_ids))


def expected_documents(cfg: Config, feed: Feed) -> dict[str, dict[str, Any]]:
    """The offline fold's documents as the sink indexes them: enriched and anonymized as
    the worker does, through the JobState schema, nulls left out."""
    enricher = Enricher.from_config(cfg.enrich.passwd_file, cfg.enrich.users_file,
                                    cfg.enrich.topology_file)
    anonymizer = Anonymizer.from_config(cfg.anonymize.fields, cfg.anonymize.key_file)
    codec = AvroCodec("JobState")
    out = {}
    for key, doc in feed.documents.items():
        wire = codec.decode(codec.encode(anonymizer.document(enricher.facts(doc))))
        out[key] = {k: v for k, v in wire.items() if v is not None}
    return out


def publish_all(cfg: Config, records: Sequence[GeneratedRecord]) -> float:
    """Every record to the raw topic as fast as the producer takes them; seconds taken."""
    publisher = RawPublisher(cfg)
    started = time.monotonic()
    for rec in records:
        publisher.send(rec)
    publisher.flush()
    return time.monotonic() - started


def publish_paced(cfg: Config, feed: Feed, rate: float,
                  sent: Callable[[int, float], None],
                  stop: threading.Event | None = None) -> float:
    """The records at ``rate`` canonical events/s (each record when the events before it are
    due), calling ``sent(index, monotonic time)`` after each, until the last or until
    ``stop`` is set; returns the events/s achieved over what was sent."""
    publisher = RawPublisher(cfg)
    started = time.monotonic()
    due_events = 0
    for i, rec in enumerate(feed.records):
        due = started + due_events / rate
        while (left := due - time.monotonic()) > 0:
            publisher.wait(min(left, 0.05))
        if stop is not None and stop.is_set():
            break
        publisher.send(rec)
        sent(i, time.monotonic())
        due_events += feed.events[i]
    publisher.flush()
    elapsed = time.monotonic() - started
    return due_events / elapsed if elapsed > 0 else 0.0

