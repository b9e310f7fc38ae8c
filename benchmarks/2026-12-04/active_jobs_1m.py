"""ActiveJobs at a million jobs without tracemalloc: the process's RSS growth, and the
records' and indexes' bytes (``nbytes``, the new design only).

``python active_jobs_1m.py new``, or ``old`` with the module of before 2026-12-04 copied as
``old_active_jobs.py`` into the directory ``OLD_ACTIVE_JOBS_DIR``
(``git show 692c138:agents/active_jobs.py``). Half Flux half Slurm keys of the memory
phase's lengths, summaries of its 11 kinds.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys

from agents.routing import job_partition
from pipeline.core.snapshots import JobSummary


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main() -> None:
    which = sys.argv[1]
    if which == "old":
        sys.path.insert(0, os.environ.get("OLD_ACTIVE_JOBS_DIR", "."))
        module = importlib.import_module("old_active_jobs")
    else:
        module = importlib.import_module("agents.active_jobs")
    kinds = ([("bench-slurm", q, r, 0) for q in ("short", "long", "gpu")
              for r in ("Priority", "Resources", "JobHeldUser")]
             + [("bench-flux", q, None, 1) for q in ("batch", "debug")])
    summaries = [JobSummary(c, q, "pending", 4, 128, g, 1796390203000 + i, 900.0, r)
                 for i, (c, q, r, g) in enumerate(kinds)]
    keys = [(f"bench-slurm:{291647030 + i}" if i % 2
             else f"bench-flux:{122367751808445193 + i * 96469010}").encode()
            for i in range(1_000_000)]
    gc.collect()
    before = rss_mib()
    active = module.ActiveJobs()
    for i, key in enumerate(keys):
        active.update(key, job_partition(key, 4), summaries[i % len(summaries)], 0.0)
    gc.collect()
    print(f"{which}: {len(active)} jobs, RSS +{rss_mib() - before:.1f} MiB, "
          f"nbytes {getattr(active, 'nbytes', 0) / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
