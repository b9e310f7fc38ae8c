"""CPU of ActiveJobs, old and new: an update of a new job, of a known job, and a snapshot
of 200,000 jobs (process time, one run). The old module as in ``active_jobs_1m.py``
(``old_active_jobs.py`` in ``OLD_ACTIVE_JOBS_DIR``). ``python active_jobs_cpu.py``.
"""

from __future__ import annotations

import importlib
import os
import sys
import time

from agents.routing import job_partition
from pipeline.core.snapshots import JobSummary, build_snapshots

JOBS = 200_000


def main() -> None:
    sys.path.insert(0, os.environ.get("OLD_ACTIVE_JOBS_DIR", "."))
    summaries = [JobSummary("bench-slurm", q, "pending", 4, 128, 0, 1796390203000, 900, r)
                 for q in ("short", "long", "gpu") for r in ("Priority", "Resources")]
    keys = [f"bench-slurm:{291647030 + i}".encode() for i in range(JOBS)]
    partitions = [job_partition(k, 4) for k in keys]
    for name in ("old_active_jobs", "agents.active_jobs"):
        active = importlib.import_module(name).ActiveJobs()
        times = []
        for shift in (0, 1):  # new keys, then the same keys again
            t = time.process_time()
            for i, key in enumerate(keys):
                active.update(key, partitions[i], summaries[(i + shift) % 6], 0.0)
            times.append((time.process_time() - t) / JOBS * 1e6)
        t = time.process_time()
        build_snapshots(active.summaries({0, 1, 2, 3}), 1000.0, "w", {0, 1, 2, 3}, 30.0)
        print(f"{name}: new job {times[0]:.2f} µs, known job {times[1]:.2f} µs, "
              f"snapshot of {JOBS} {time.process_time() - t:.2f} s")


if __name__ == "__main__":
    main()
