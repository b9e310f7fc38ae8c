"""Memory at N tracked jobs: the producer edges publish N pending jobs, the worker tracks
them; the resident memory of each process is sampled throughout.

Half the jobs are Flux jobs, played by ``python -m pipeline.edges flux --recorded`` from a
journal recording (one ``submit`` response per job, jobspec included: the backlog an edge
sees when it connects to an instance with that many jobs); the other half Slurm jobs,
polled by ``python -m pipeline.edges slurm`` (poller only) from one ``squeue --json``
document listing them all pending (what the poller sees on a cluster with that queue).
The edges run as the lean entry point that sites deploy. The worker (no sink: the figure
is the worker's) consumes everything; once it has committed every raw and canonical
partition to its end, its memory and its RocksDB store's size on disk are read. Then the
jobs its table holds are counted from the table's changelog (what the table is restored
from): a worker that caught up while holding fewer than the N jobs, without sending any to
the DLQ, fails the phase instead of reporting the memory of fewer jobs as that of N.

The jobs come from the synthetic workload, generated in chunks of :data:`CHUNK` jobs (the
first record of each job only) so that a million jobs never sit in memory at once.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from rich.console import Console

from pipeline.kafka.positions import Positions
from pipeline.kafka.topics import canonical_topic, ensure_topics, jobs_changelog_topic
from pipeline.runtime.children import Child, log_tail
from pipeline.runtime.config import Config
from pipeline.runtime.errors import ServiceError
from pipeline.tooling.bench.feed import EVENTS_PER_JOB, workload_spec
from pipeline.tooling.bench.rss import Flow, RssSampler, flow, mib
from pipeline.tooling.demo import RawPublisher, publish_paced
from pipeline.tooling.workload import GeneratedRecord, Workload

__all__ = ["FeedMemory", "SlurmEdgeResult", "TrackedResult", "pending_jobs", "require_held",
           "run_slurm_edge", "run_tracked"]

CHUNK = 10_000
_POLL_S = 0.5
#: the edges publishing nothing for this long have failed
_STALL_S = 120.0
#: the oldest submit time of the tracked jobs (the workload's ids start on 2026-01-01)
_SPAN_MAX_S = 90 * 86400
#: with a feed: how long a finished job stays in the worker's table (module docstring)
FEED_DONE_GRACE_S = 120.0
#: with a feed: the worker's RSS is read this often
_FEED_SERIES_S = 60.0
#: the feed's seed, apart from the tracked jobs' chunks (seed + chunk number)
_FEED_SEED = 1_000_003


@dataclass
class FeedMemory:
    """The worker's memory while new jobs came and went beside the tracked ones."""

    seconds: float
    #: canonical events/s asked, and the feed's jobs and raw records
    rate: float
    jobs: int
    records: int
    #: worker RSS (MiB) when the feed started, then every minute of it
    rss_series_mib: list[float | None]
    #: once the worker caught up with the feed
    rss_end_mib: float | None
    rss_peak_mib: float | None
    #: the end against the feed's start
    growth_mib: float | None


@dataclass
class TrackedResult:
    jobs: int
    flux_jobs: int
    slurm_jobs: int
    records: int
    #: jobs in the worker's table at the end (its changelog's live keys): at least ``jobs``
    held_jobs: int
    worker_rss_peak_mib: float | None
    worker_rss_end_mib: float | None
    store_mib: float
    flux_edge_rss_peak_mib: float | None
    slurm_edge_rss_peak_mib: float | None
    slurm_edge_rss_end_mib: float | None
    #: squeue document the Slurm edge polled
    squeue_mib: float
    seconds: float
    #: with a feed after catching up (module docstring)
    feed: FeedMemory | None = None


def pending_jobs(jobs: int, seed: int) -> Iterator[GeneratedRecord]:
    """The first record (submit: Flux ``submit`` response, Slurm pending ``squeue``) of each
    of ``jobs`` synthetic jobs with distinct ids, submitted over the ``jobs`` seconds (at
    most 90 days) before now: a queue that built up (the worker refuses events dated more
    than a day ahead)."""
    start = float(int(time.time())) - min(jobs, _SPAN_MAX_S)
    done = 0
    chunk_no = 0
    while done < jobs:
        n = min(CHUNK, jobs - done)
        spec = workload_spec(seed + chunk_no, n, 1000.0, 0.05, start=start)
        first: dict[str, GeneratedRecord] = {}
        for rec in Workload(spec).records():
            first.setdefault(rec.key, rec)
        yield from first.values()
        done += n
        chunk_no += 1
        # Slurm ids grow 10 per second of submit time and Flux ids with the millisecond:
        # the next chunk starts well after this one's ids
        start += n


def _write_sources(directory: Path, jobs: int, seed: int, *,
                   flux: bool = True) -> tuple[int, int, int]:
    """The Flux recording and the squeue document; returns (flux jobs, slurm jobs, bytes
    of the squeue document). Without ``flux``, only the squeue document, of ``jobs`` Slurm
    jobs."""
    directory.mkdir(parents=True, exist_ok=True)
    flux_jobs = slurm = 0
    meta: dict[str, Any] | None = None
    records = pending_jobs(jobs if flux else sys.maxsize, seed)
    with (directory / "journal.jsonl").open("wb") as journal, \
            (directory / "squeue-jobs.jsonl").open("wb") as squeue_jobs:
        for rec in records:
            if not flux and slurm >= jobs:
                break
            if rec.format == "flux-journal":
                if flux:
                    journal.write(rec.payload + b"\n")
                    flux_jobs += 1
            elif rec.format == "slurm-squeue":
                doc = json.loads(rec.payload)
                meta = meta or {k: v for k, v in doc.items() if k != "jobs"}
                for job in doc["jobs"]:
                    squeue_jobs.write((b",\n" if slurm else b"")
                                      + json.dumps(job, separators=(",", ":")).encode())
                slurm += 1
    # one squeue --json document with every pending job, copied (500,000 jobs are 284 MiB)
    squeue = directory / "squeue.json"
    with squeue.open("wb") as out, (directory / "squeue-jobs.jsonl").open("rb") as body:
        head = json.dumps({**(meta or {"meta": {}, "errors": []}), "jobs": []},
                          separators=(",", ":")).encode()
        out.write(head[:-2])  # without the closing "]}"
        shutil.copyfileobj(body, out)
        out.write(b"]}")
    (directory / "squeue-jobs.jsonl").unlink()
    (directory / "sacct.json").write_text(json.dumps({**(meta or {}), "jobs": []}))
    return flux_jobs, slurm, squeue.stat().st_size


def _slurm_edge_cfg(cfg: Config, sources: Path, *, timeout: float,
                    poll_interval_s: float) -> Config:
    """The Slurm edge polling the squeue document in ``sources`` (poller only)."""
    return cfg.replace(cluster="bench-slurm", edge={"slurm": {
        "receiver": False, "hooks": False, "bridge": False, "poller": True,
        # the poller appends --starttime/--endtime to sacct: sh takes them as $0.. and
        # cat never sees them
        "squeue_command": f"sh -c 'cat {sources / 'squeue.json'}' squeue",
        "sacct_command": f"sh -c 'cat {sources / 'sacct.json'}' sacct",
        "poll_interval_s": poll_interval_s, "command_timeout_s": timeout}})


def _edge(cfg: Config, args: list[str], log: Path) -> Child:
    """``python -m pipeline.edges <args>`` with ``cfg``, started; output to ``log``."""
    return Child("edge", cfg, args, log, module="pipeline.edges").start()


@dataclass
class SlurmEdgeResult:
    jobs: int
    #: records the edge published (one per job, all in the first poll)
    records: int
    #: polls the edge made: the first publishes every job, the second finds none changed
    polls: int
    rss_peak_mib: float | None
    rss_end_mib: float | None
    squeue_mib: float
    seconds: float


#: what the poller logs (at -v) after each poll
_POLL_LINE = "slurm poll: "


def run_slurm_edge(cfg: Config, jobs: int, seed: int, logs: Path, *, timeout: float,
                   console: Console) -> SlurmEdgeResult:
    """The Slurm edge alone (``python -m pipeline.edges -v slurm``, poller only) polling
    one ``squeue --json`` of ``jobs`` pending jobs twice: the first poll publishes every
    job, the second none (unchanged) but holds the last poll's digests beside the new
    ones. Its RSS is sampled every 100 ms until the second poll ended and Kafka has every
    record."""
    sources = Path(cfg.edge.spool_dir).parent / "sources"
    with console.status(f"slurm-edge: writing a squeue document of {jobs} pending jobs"):
        _, slurm_jobs, squeue_bytes = _write_sources(sources, jobs, seed, flux=False)
    ensure_topics(cfg)
    positions = Positions(AdminClient(cfg.librdkafka()))
    raw = [cfg.topics.raw]
    rss = RssSampler(0.1)
    started = time.monotonic()
    # the next poll starts a second after the first ended
    edge = _edge(_slurm_edge_cfg(cfg, sources, timeout=timeout, poll_interval_s=1.0),
                 ["-v", "slurm"], logs / "edge-slurm.log")
    try:
        rss.watch("slurm", edge.pid)
        rss.start()
        deadline = time.monotonic() + timeout
        with console.status(f"slurm-edge: the edge polls {slurm_jobs} jobs twice"):
            while True:
                if edge.poll() is not None:
                    raise ServiceError(f"the Slurm edge exited:\n{log_tail(edge.log)}")
                polls = edge.log.read_text(errors="replace").count(_POLL_LINE)
                published = _ends(positions, raw)
                if polls >= 2 and published >= slurm_jobs:
                    break
                if time.monotonic() > deadline:
                    raise ServiceError(
                        f"the Slurm edge made {polls} polls and published {published} of "
                        f"{slurm_jobs} records in {timeout:.0f} s:\n{log_tail(edge.log, 5)}")
                time.sleep(_POLL_S)
        rss.sample()
        seconds = time.monotonic() - started
    finally:
        edge.stop()
        rss.stop()
    return SlurmEdgeResult(
        jobs=slurm_jobs, records=_ends(positions, raw), polls=polls,
        rss_peak_mib=mib(rss.peak.get("slurm")), rss_end_mib=mib(rss.last.get("slurm")),
        squeue_mib=round(squeue_bytes / 2**20, 1), seconds=round(seconds, 1))


def _store_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def run_tracked(cfg: Config, jobs: int, seed: int, logs: Path, *, timeout: float,
                console: Console, feed_s: float = 0.0, feed_rate: float = 1000.0,
                time_scale: float = 0.05) -> TrackedResult:
    if feed_s > 0:
        cfg = cfg.replace(worker={"done_grace_s": FEED_DONE_GRACE_S})
    sources = Path(cfg.edge.spool_dir).parent / "sources"
    with console.status(f"memory: writing {jobs} pending jobs for the edges"):
        flux_jobs, slurm_jobs, squeue_bytes = _write_sources(sources, jobs, seed)
    ensure_topics(cfg)
    positions = Positions(AdminClient(cfg.librdkafka()))
    raw = [cfg.topics.raw]
    canonical = [canonical_topic(cfg.worker.app_id)]
    changelog = jobs_changelog_topic(cfg.worker.app_id)
    edge_rss = RssSampler(0.1)
    started = time.monotonic()
    with flow(cfg, logs, sink=False) as f:
        flux_cfg = cfg.replace(cluster="bench-flux")
        slurm_cfg = _slurm_edge_cfg(cfg, sources, timeout=timeout, poll_interval_s=86400.0)
        edges = [_edge(flux_cfg, ["flux", "--recorded", str(sources / "journal.jsonl")],
                       logs / "edge-flux.log"),
                 _edge(slurm_cfg, ["slurm"], logs / "edge-slurm.log")]
        edge_rss.watch("flux", edges[0].pid)
        edge_rss.watch("slurm", edges[1].pid)
        edge_rss.start()
        try:
            deadline = time.monotonic() + timeout
            progress = (0, time.monotonic())
            with console.status(f"memory: the edges publish {jobs} jobs; the worker tracks "
                                "them"):
                while True:
                    f.check()
                    if edges[0].poll() not in (None, 0):
                        raise ServiceError(f"the Flux edge failed:\n{log_tail(edges[0].log)}")
                    if edges[1].poll() is not None:
                        raise ServiceError(f"the Slurm edge exited:\n{log_tail(edges[1].log)}")
                    published = _ends(positions, raw)
                    if published >= jobs and edges[0].poll() == 0:
                        break
                    if published > progress[0]:
                        progress = (published, time.monotonic())
                    if time.monotonic() > min(deadline, progress[1] + _STALL_S):
                        raise ServiceError(
                            f"the edges published {published} of {jobs} records (logs: "
                            f"{edges[0].log}, {edges[1].log}):\n{log_tail(edges[1].log, 5)}")
                    time.sleep(_POLL_S)
                edge_rss.sample()
                for edge in edges:
                    edge.stop()
                edge_rss.stop()
                while not _caught_up(positions, cfg.worker.app_id, raw + canonical):
                    f.check()
                    if time.monotonic() > deadline:
                        raise ServiceError(f"the worker did not catch up within {timeout:.0f} s")
                    time.sleep(_POLL_S)
                refused = _ends(positions, [cfg.topics.dlq])
                if refused:
                    raise ServiceError(
                        f"the worker sent {refused} of the jobs' records to the DLQ: it does "
                        f"not track {jobs} jobs (log: {f.workers[0].log})")
            f.rss.sample()
            seconds = time.monotonic() - started
            worker_peak, worker_end = f.rss.peak.get("worker-0"), f.rss.last.get("worker-0")
            records = _ends(positions, raw)  # the tracked jobs', before any feed
            fed = None
            if feed_s > 0:
                fed = _feed(cfg, f, positions, raw + canonical, seed, feed_s, feed_rate,
                            time_scale, timeout=timeout, console=console)
        finally:
            for edge in edges:
                edge.stop()
            edge_rss.stop()
        store = _store_bytes(Path(cfg.worker.store_dir))
    # after the flow: the worker's figures are taken, and this read does not compete with it
    with console.status(f"memory: counting the jobs in the worker's table ({changelog})"):
        held = require_held(_changes(cfg, positions, changelog, timeout), jobs, changelog,
                            f.workers[0].log)
    return TrackedResult(
        jobs=jobs, flux_jobs=flux_jobs, slurm_jobs=slurm_jobs,
        records=records, held_jobs=held, worker_rss_peak_mib=mib(worker_peak),
        worker_rss_end_mib=mib(worker_end), store_mib=round(store / 2**20, 1),
        flux_edge_rss_peak_mib=mib(edge_rss.peak.get("flux")),
        slurm_edge_rss_peak_mib=mib(edge_rss.peak.get("slurm")),
        slurm_edge_rss_end_mib=mib(edge_rss.last.get("slurm")),
        squeue_mib=round(squeue_bytes / 2**20, 1), seconds=seconds, feed=fed)


def _feed(cfg: Config, f: Flow, positions: Positions, topics: list[str], seed: int,
          seconds: float, rate: float, time_scale: float, *, timeout: float,
          console: Console) -> FeedMemory:
    """New jobs at ``rate`` events/s for ``seconds`` into the running flow, the worker's
    RSS read every minute and once it caught up (module docstring)."""
    jobs = max(1, math.ceil(seconds * rate / EVENTS_PER_JOB))
    with console.status(f"memory: generating a feed of {jobs} jobs"):
        workload = Workload(workload_spec(seed + _FEED_SEED, jobs, rate, time_scale))
        records = [rec for rec in workload.records()
                   if rec.time <= workload.spec.start + seconds]
    del workload

    worker = f.workers[0]
    assert worker.pid is not None
    watch = RssSampler(1.0)  # the feed's own peak, apart from the catch-up's
    watch.watch("worker", worker.pid)

    def rss() -> float | None:
        watch.sample()
        return mib(watch.last.get("worker"))

    series = [rss()]
    started = time.monotonic()
    next_read = started + _FEED_SERIES_S

    def tick() -> None:
        nonlocal next_read
        f.check()
        if time.monotonic() >= next_read:
            series.append(rss())
            next_read += _FEED_SERIES_S

    publisher = RawPublisher(cfg)
    watch.start()
    try:
        with console.status(f"memory: feeding {len(records)} records for {seconds:.0f} s "
                            "beside the tracked jobs"):
            publish_paced(records, publisher, 1.0, tick)
            publisher.flush()
            deadline = time.monotonic() + timeout
            while not _caught_up(positions, cfg.worker.app_id, topics):
                f.check()
                if time.monotonic() > deadline:
                    raise ServiceError(f"the worker did not catch up with the feed within "
                                       f"{timeout:.0f} s")
                time.sleep(_POLL_S)
        end = rss()
    finally:
        watch.stop()
    start_mib = series[0]
    return FeedMemory(
        seconds=round(time.monotonic() - started, 1), rate=rate, jobs=jobs,
        records=len(records), rss_series_mib=series, rss_end_mib=end,
        rss_peak_mib=mib(watch.peak.get("worker")),
        growth_mib=None if end is None or start_mib is None else round(end - start_mib, 1))


def require_held(changes: Iterable[tuple[bytes | None, bytes | None]], jobs: int,
                 changelog: str, log: Path) -> int:
    """The jobs a table holds after ``changes`` (its changelog's keys and values in order:
    a key is held unless its last value is a tombstone); ServiceError when fewer than
    ``jobs``."""
    held: set[bytes | None] = set()
    for key, value in changes:
        if value is None:
            held.discard(key)
        else:
            held.add(key)
    if len(held) < jobs:
        raise ServiceError(
            f"the worker's table holds {len(held)} of the {jobs} tracked jobs (changelog "
            f"{changelog}), with none in the DLQ: its memory is not that of {jobs} jobs "
            f"(log: {log})")
    return len(held)


def _changes(cfg: Config, positions: Positions, topic: str,
             timeout: float) -> Iterator[tuple[bytes | None, bytes | None]]:
    """(key, value) of every record of ``topic`` up to its end now, partition by partition
    in offset order; ServiceError when it cannot be read to its end within ``timeout``."""
    todo = {p: end for (_, p), end in positions.ends([topic]).items() if end > 0}
    if not todo:
        return
    consumer = Consumer(cfg.librdkafka(**{
        "group.id": f"{cfg.worker.app_id}-bench-count", "enable.auto.commit": False}))
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in todo])
        deadline = time.monotonic() + timeout
        while todo:
            if time.monotonic() > deadline:
                raise ServiceError(f"{topic}: partitions {sorted(todo)} not read to their end "
                                   f"within {timeout:.0f} s")
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                error = msg.error()
                if error is not None:
                    if error.fatal():
                        raise ServiceError(f"kafka consumer of {topic} failed: {error}")
                    continue
                yield msg.key(), msg.value()
                if msg.offset() + 1 >= todo.get(msg.partition(), 0):
                    todo.pop(msg.partition(), None)
    except KafkaException as exc:
        raise ServiceError(f"kafka: {exc}") from exc
    finally:
        consumer.close()


def _ends(positions: Positions, topics: list[str]) -> int:
    try:
        return sum(positions.ends(topics).values())
    except ServiceError:
        return 0  # a topic just created has no leader for a moment


def _caught_up(positions: Positions, group: str, topics: list[str]) -> bool:
    try:
        ends = positions.ends(topics)
        committed = positions.committed(group, list(ends))
    except ServiceError:
        return False  # as above
    return all(committed.get(tp, -1) >= end for tp, end in ends.items() if end > 0)
