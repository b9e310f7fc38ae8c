"""What the worker's fold cache holds once a live feed has run, offline (no services).

``python benchmarks/2026-12-07/fold_cache.py [--jobs N] [--capacity-bytes B |
--capacity-jobs C]``: the memory phase's feed workload
(:func:`pipeline.tooling.bench.feed.workload_spec`, whole lives of jobs, half Flux half
Slurm) is normalized and folded as the worker does, through a
:class:`agents.states.JobStates` over a dict; then the RSS it added (less the dict's
values) and the cache's hits and misses are printed. ``--capacity-jobs`` bounds the cache
by a count of folds, as before 2026-12-07.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
import tracemalloc
from collections import defaultdict

from agents.states import FOLD_CACHE_BYTES, JobStates
from pipeline.fold import JobFold
from pipeline.parsers.normalize import normalize
from pipeline.tooling.bench.feed import raw_record, workload_spec
from pipeline.tooling.workload import Workload


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=6000)
    parser.add_argument("--capacity-bytes", type=int, default=FOLD_CACHE_BYTES)
    parser.add_argument("--capacity-jobs", type=int, default=None,
                        help="the bound before 2026-12-07: this many folds, whatever size")
    parser.add_argument("--trace", action="store_true", help="tracemalloc (slower)")
    args = parser.parse_args()
    workload = Workload(workload_spec(1_000_004, args.jobs, 1000.0, 0.05, start=1.8e9))
    events = [ev for rec in workload.records() for ev in normalize(raw_record(rec))]
    per_job: dict[str, int] = defaultdict(int)
    for ev in events:
        per_job[ev.key] += 1
    print(f"{len(events)} events of {len(per_job)} jobs, "
          f"{len(events) / len(per_job):.1f} a job", file=sys.stderr)
    gc.collect()
    before = rss_mib()
    if args.trace:
        tracemalloc.start()
    t0 = time.process_time()
    table: dict[bytes, bytes] = {}
    states = JobStates(table, capacity_bytes=args.capacity_bytes)
    if args.capacity_jobs is not None:  # the old bound: a count, and no budget
        states.capacity_bytes = 2**40
        remember = states._remember

        def count_bound(key: bytes, fold: JobFold, size: int) -> None:
            remember(key, fold, size)
            while len(states._folds) > args.capacity_jobs:
                states._drop(next(iter(states._folds)))
        states._remember = count_bound  # type: ignore[method-assign]
    for ev in events:
        key = ev.key.encode()
        fold = states.get(key) or JobFold()
        fold.add(ev)
        fold.documents()
        states.put(key, fold)
    cpu = time.process_time() - t0
    gc.collect()
    traced = tracemalloc.get_traced_memory()[0] / 2**20 if args.trace else None
    values = sum(map(len, table.values())) / 2**20
    bound = (f"{args.capacity_jobs} folds" if args.capacity_jobs is not None
             else f"{args.capacity_bytes} bytes")
    print(f"bound {bound}: cached {len(states._folds)} ({states.cached_bytes} bytes), "
          f"hits {states.hits} misses {states.misses}, "
          f"RSS +{rss_mib() - before:.1f} MiB (table values {values:.1f} MiB of it), "
          f"traced {traced}, {cpu * 1e6 / len(events):.0f} µs/event")


if __name__ == "__main__":
    main()
