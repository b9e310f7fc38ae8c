"""The jobs stage alone over the bench's 3,000-job workload (BENCHMARKS.md, 2026-12-01).

``python stage_cost.py LABEL [JOBS [RUNS]]``: CPU ms per event of each run and their
median; ``RUNS`` 0 builds the workload only (the baseline of a callgrind comparison).
"""

import statistics
import sys

from pipeline.bench.feed import build_feed, workload_spec
from pipeline.bench.stage import stage_cost
from pipeline.config import Config

label = sys.argv[1]
jobs = int(sys.argv[2]) if len(sys.argv) > 2 else 3000
count = int(sys.argv[3]) if len(sys.argv) > 3 else 5
feed = build_feed(workload_spec(1, jobs, 1000.0, 0.05, start=1_796_000_000.0))
runs = [stage_cost(Config(), feed).cpu_ms_per_event for _ in range(count)]
if runs:
    print(label, "stage ms/event:", " ".join(f"{r:.4f}" for r in runs),
          f"median {statistics.median(runs):.4f}")
