"""The worker's fold caches under a live feed, offline (no services): misses, bytes, CPU.

``python benchmarks/2026-12-07/fold_cache.py [--jobs N] [--job-bytes B] [--node-bytes B]
[--count C]``: the memory phase's feed workload
(:func:`pipeline.tooling.bench.feed.workload_spec`: whole lives of jobs, half Flux half
Slurm, the Flux jobs' allocations giving node events) goes through
:class:`agents.jobs.JobsStage` as :func:`pipeline.tooling.bench.stage.stage_cost` runs it,
its tables dicts, a batch ending every 250 events (a 0.25 s timer at 1,000 events/s).
Printed: the caches' folds, bytes, hits and misses, the node states' sizes, the bytes
written to each table, and the stage's CPU per event (the tables are dicts that keep
every value, so this process's RSS says nothing of the caches': the RSS rows of
BENCHMARKS.md came from the script's first version, at f2e04bc). ``--count C``
bounds each cache by C folds instead, as before 2026-12-07 (C = 2048).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from types import SimpleNamespace
from typing import Any

from agents.active_jobs import ActiveJobs
from agents.jobs import JobsStage
from agents.routing import OfflineKafka, job_partition
from agents.states import (
    FOLD_CACHE_BYTES,
    NODE_CACHE_BYTES,
    JobStates,
    NodeStates,
    _States,
    stored_nodes,
)
from pipeline.codecs.codec import raw_to_avro
from pipeline.codecs.wire import Wire
from pipeline.core.anonymize import Anonymizer
from pipeline.core.enrich import Enricher
from pipeline.runtime.config import Config
from pipeline.tooling.bench.feed import raw_record, workload_spec
from pipeline.tooling.bench.stage import StateOutputs
from pipeline.tooling.workload import Workload


class Table(dict[bytes, bytes]):
    """A table that counts the bytes written to it (its changelog's, and RocksDB's)."""

    written = 0

    def __setitem__(self, key: bytes, value: bytes) -> None:
        self.written += len(value)
        super().__setitem__(key, value)


def count_bound(states: _States[Any], count: int) -> None:
    """Bound ``states`` by a count of folds, as before 2026-12-07."""
    states.capacity_bytes = 2**40
    remember = states._remember

    def bounded(key: bytes, fold: Any, size: int) -> None:
        remember(key, fold, size)
        while len(states._folds) > count:
            states._drop(next(iter(states._folds)))
    states._remember = bounded  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=6000)
    parser.add_argument("--job-bytes", type=int, default=FOLD_CACHE_BYTES)
    parser.add_argument("--node-bytes", type=int, default=NODE_CACHE_BYTES)
    parser.add_argument("--count", type=int, default=None)
    args = parser.parse_args()
    cfg = Config()
    wire = Wire(cfg)
    workload = Workload(workload_spec(1_000_004, args.jobs, 1000.0, 0.05, start=1.8e9))
    records = []
    for offset, rec in enumerate(workload.records()):
        key = rec.key.encode()
        records.append(SimpleNamespace(
            topic=cfg.topics.raw, partition=job_partition(key, cfg.kafka.partitions),
            offset=offset, key=key,
            value=wire.codecs["raw"].encode(raw_to_avro(raw_record(rec)))))
    del workload
    jobs_table, nodes_table = Table(), Table()
    states = JobStates(jobs_table, capacity_bytes=args.job_bytes)
    nodes = NodeStates(nodes_table, capacity_bytes=args.node_bytes)
    if args.count is not None:
        count_bound(states, args.count)
        count_bound(nodes, args.count)
    stage = JobsStage(
        cfg, wire=wire, outputs=StateOutputs(cfg.topics.state),
        kafka=OfflineKafka(cfg.kafka.partitions),
        anonymizer=Anonymizer.from_config(cfg.anonymize.fields, cfg.anonymize.key_file),
        enricher=Enricher.from_config(cfg.enrich.passwd_file, cfg.enrich.users_file,
                                      cfg.enrich.topology_file),
        states=states, nodes=nodes, active=ActiveJobs(), acknowledge=lambda message: None)

    async def run() -> None:
        for n, message in enumerate(records, 1):
            wait = stage.take(message)
            if wait is not None:
                await wait
            if n % 250 == 0:
                await stage.end_batch()
        await stage.flush()

    t0 = time.process_time()
    asyncio.run(run())
    cpu = time.process_time() - t0
    events = sum(stage.counters._folded[c]._value.get() for c in stage.counters._folded)
    sizes = sorted(fold.stored_bytes for _, fold in stored_nodes(nodes_table))
    bound = f"{args.count} folds each" if args.count is not None else (
        f"jobs {args.job_bytes} bytes, nodes {args.node_bytes} bytes")
    print(f"bound {bound}: {len(records)} records, {events:.0f} events")
    for name, s in (("jobs", states), ("nodes", nodes)):
        print(f"  {name}: cached {len(s._folds)} ({s.cached_bytes} bytes), hits {s.hits}, "
              f"misses {s.misses}")
    print(f"  node states: {len(sizes)}, median {sizes[len(sizes) // 2]} bytes, "
          f"max {sizes[-1]}")
    for name, table in (("jobs", jobs_table), ("nodes", nodes_table)):
        print(f"  {name} table written: {table.written / 2**20:.1f} MiB, "
              f"{table.written / events:.0f} bytes per event")
    print(f"  {cpu * 1e6 / events:.0f} µs of CPU/event")


if __name__ == "__main__":
    main()
