"""Where a worker's memory goes at N tracked jobs, offline (no services): the in-memory
parts of the jobs stage built at their sizes of the memory phase, each measured alone.

``python benchmarks/2026-12-04/memory_breakdown.py [--jobs N] [--real R] [PART ...]``
with PART among ``active``, ``recent``, ``folds``, ``rocksdb`` (default: all), each in a
fresh process (RSS delta and tracemalloc's traced bytes around building the part).

The summaries and keys are those of the memory phase's workload
(:func:`pipeline.tooling.bench.tracked.pending_jobs`, half Flux half Slurm): ``R`` real
jobs are normalized and folded as the worker does, and repeated under new job ids of the
same length up to ``N`` (folding a million takes ~8 minutes; their summaries repeat
anyway).
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

from pipeline.core.snapshots import JobSummary, summarize
from pipeline.fold import JobFold
from pipeline.parsers.normalize import normalize
from pipeline.tooling.bench.feed import raw_record
from pipeline.tooling.bench.tracked import pending_jobs


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def real_jobs(real: int) -> list[tuple[bytes, JobSummary, JobFold]]:
    out = []
    for rec in itertools.islice(pending_jobs(real, 7), real):
        jf = JobFold()
        for ev in normalize(raw_record(rec)):
            jf.add(ev)
        out.append((rec.key.encode(), summarize(jf.documents()[-1]), jf))
    return out


def jobs(n: int, real: list[tuple[bytes, JobSummary, JobFold]]
         ) -> Iterator[tuple[bytes, JobSummary, JobFold]]:
    """``n`` jobs: the real ones, then again under other ids of the same length."""
    for i in range(n):
        key, summary, fold = real[i % len(real)]
        round_ = i // len(real)
        if round_:
            cluster, _, job_id = key.partition(b":")
            job_id = str(int(job_id) + round_ * 10**7).encode()[-len(job_id):]
            key = cluster + b":" + job_id
        yield key, summary, fold


def measure(name: str, build: Callable[[], Any]) -> dict[str, Any]:
    gc.collect()
    before = rss_mib()
    tracemalloc.start()
    t0 = time.monotonic()
    kept = build()
    seconds = time.monotonic() - t0
    gc.collect()
    traced, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    result = {"part": name, "rss_delta_mib": round(rss_mib() - before, 1),
              "traced_mib": round(traced / 2**20, 1),
              "traced_peak_mib": round(peak / 2**20, 1), "seconds": round(seconds, 1)}
    del kept
    return result


def part_active(n: int, real: list) -> Any:
    from agents.active_jobs import ActiveJobs
    from agents.routing import job_partition

    def build() -> Any:
        active = ActiveJobs()
        for key, summary, _ in jobs(n, real):
            active.update(key, job_partition(key, 4), summary, 0.0)
        return active
    return build


def part_recent(n: int, real: list) -> Any:
    from agents.canonical import RecentIds

    def build() -> Any:
        recent = RecentIds()
        for key, _, _ in jobs(max(n, recent.capacity), real):
            recent.seen(key + b"-submit-event")
        return recent
    return build


def part_folds(n: int, real: list) -> Any:
    from agents.states import JobStates

    # the cache's bound on this day: 2,048 folds (agents.states: now a budget of bytes)
    values = {key: fold.to_json() for key, _, fold in jobs(2048, real)}
    print(f"state value: {sum(map(len, values.values())) / len(values):.0f} bytes a job",
          file=sys.stderr)

    def build() -> Any:
        states = JobStates(dict(values), capacity_bytes=2**40)
        for key in values:
            states.get(key)
        return states
    return build


def part_rocksdb(n: int, real: list) -> Any:
    import rocksdict
    from faust.stores.rocksdb import RocksDBOptions

    from agents.app import STORE_OPTIONS
    from agents.routing import job_partition

    directory = tempfile.mkdtemp(prefix="jobstream-rocks-")
    given = json.loads(os.environ.get("STORE_OPTIONS", "null")) or STORE_OPTIONS
    print(f"store options: {given}", file=sys.stderr)
    options = RocksDBOptions(**given, use_rocksdict=True)

    def build() -> Any:
        dbs = [rocksdict.Rdict(f"{directory}/jobs-{p}.db", options=options.as_options())
               for p in range(4)]
        values = [fold.to_json() for _, _, fold in real]
        for i, (key, _, _) in enumerate(jobs(n, real)):
            db = dbs[job_partition(key, 4)]
            if db.get(key) is None:  # the stage reads a state before it writes one
                db[key] = values[i % len(values)]
        return dbs
    return build


PARTS = {"active": part_active, "recent": part_recent, "folds": part_folds,
         "rocksdb": part_rocksdb}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--real", type=int, default=20_000)
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("parts", nargs="*", default=list(PARTS))
    args = parser.parse_args()
    if args.one:
        real = real_jobs(args.real)
        name = args.parts[0]
        tracing = name != "rocksdb"  # RocksDB allocates outside Python
        build = PARTS[name](args.jobs, real)
        result = measure(name, build) if tracing else _rss_only(name, build)
        print(json.dumps(result))
        return
    for name in args.parts:
        subprocess.run([sys.executable, __file__, "--one", "--jobs", str(args.jobs),
                        "--real", str(args.real), name], check=True)


def _rss_only(name: str, build: Callable[[], Any]) -> dict[str, Any]:
    before = rss_mib()
    t0 = time.monotonic()
    kept = build()
    result = {"part": name, "rss_delta_mib": round(rss_mib() - before, 1),
              "seconds": round(time.monotonic() - t0, 1)}
    del kept
    return result


if __name__ == "__main__":
    main()
