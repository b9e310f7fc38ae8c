"""The worker's CPU per node-usage sample, offline (BENCHMARKS.md, issue 33 section 5).

``python sample_cpu.py [--nodes N] [--jobs-per-node J] [--intervals I] [--lifecycle]
[--digest]``: the real :class:`agents.jobs.JobsStage` of ``tests/agents_factory.py`` (no
Kafka, no Elasticsearch) takes ``node-usage`` records as the bench's ``node-usage`` phase
publishes them (:func:`pipeline.tooling.bench.usage.usage_feed`: each round one sample per
job, in time order), a batch ending every ``--batch`` records as the quarter-second timer
ends the bench's (1,333 samples/s: about 333 a batch, every one of another job). The first
round is the warm-up (each job's first sample); the CPU (``time.process_time``) of the
other rounds over their samples is the figure. ``--lifecycle`` gives every job a running
Slurm lifecycle first (submit, start), as a real job has; ``--digest`` prints a hash of
everything sent and of the table, to compare two trees' outputs byte for byte. The
collector runs at the worker's thresholds (:data:`agents.cli.GC_THRESHOLDS`).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from agents_factory import Message, RecordedOutputs, jobs_stage  # noqa: E402
from offline_path import raw_value  # noqa: E402

from agents.cli import GC_THRESHOLDS  # noqa: E402
from agents.routing import job_partition  # noqa: E402
from agents.states import JobStates  # noqa: E402
from pipeline.core.model import JobEvent  # noqa: E402
from pipeline.fold import JobFold  # noqa: E402
from pipeline.runtime.config import Config  # noqa: E402
from pipeline.tooling.bench.feed import raw_record  # noqa: E402
from pipeline.tooling.bench.usage import usage_feed  # noqa: E402

START = 1_796_000_000.0


def lifecycle(cluster: str, job_id: str, t: float) -> JobFold:
    """A running Slurm job's fold: submitted and started (one node, four cores) before
    ``t``, as the hook edge states them."""
    jf = JobFold()
    for name, ts, facts in (("submit", t - 100, {"t_submit": t - 100}),
                            ("start", t - 60, {"t_start": t - 60, "ncores": 4, "nnodes": 1,
                                               "mem_alloc_mb": 8192})):
        jf.add(JobEvent(cluster=cluster, scheduler="slurm", job_id=job_id, event=name,
                        timestamp=ts, source="slurm-hook", event_id=f"{name}-{job_id}",
                        facts=facts))
    return jf


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=2500)
    ap.add_argument("--jobs-per-node", type=int, default=4)
    ap.add_argument("--intervals", type=int, default=4)
    ap.add_argument("--batch", type=int, default=333)
    ap.add_argument("--lifecycle", action="store_true")
    ap.add_argument("--cache-bytes", type=int, default=None,
                    help="bytes of states whose folds stay in memory "
                         "(agents.states.FOLD_CACHE_BYTES)")
    ap.add_argument("--digest", action="store_true")
    args = ap.parse_args()
    cfg = Config()
    feed = usage_feed(args.nodes, args.jobs_per_node, args.intervals, seed=1, start=START)
    jobs = args.nodes * args.jobs_per_node
    partitions = cfg.kafka.partitions
    messages = []
    for n, rec in enumerate(feed.records):
        key = rec.key.encode()
        messages.append(Message(cfg.topics.raw, job_partition(key, partitions), n, key,
                                raw_value(raw_record(rec))))
    outputs = RecordedOutputs()
    table: dict[bytes, bytes] = {}
    if args.lifecycle:
        for rec in feed.records[:jobs]:
            table[rec.key.encode()] = lifecycle(rec.cluster, rec.key.split(":")[1],
                                                START).to_json()
    states = JobStates(table, max_bytes=cfg.worker.max_state_bytes)
    if args.cache_bytes is not None:
        states.capacity_bytes = args.cache_bytes
    stage = jobs_stage(cfg, outputs=outputs, states=states)

    async def drive(batch: list[Message]) -> None:
        for m in batch:
            wait = stage.take(m)
            if wait is not None:
                await wait
        await stage.flush()

    def run(part: list[Message]) -> float:
        began = time.process_time()
        for i in range(0, len(part), args.batch):
            asyncio.run(drive(part[i:i + args.batch]))
        return time.process_time() - began

    # the worker's collector settings (agents.cli): at the default thresholds the
    # collections rescan the feed and the table every few samples
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    run(messages[:jobs])
    measured = messages[jobs:]
    cpu = run(measured)
    print(f"{len(measured)} samples of {jobs} jobs, batches of {args.batch}: "
          f"{1000 * cpu / len(measured):.3f} ms CPU per sample "
          f"(fold cache hits {stage.states.hits}, misses {stage.states.misses})")
    if args.digest:
        h = hashlib.sha256()
        for topic, key, value, _ in outputs.sent:
            h.update(json.dumps([topic, key and key.hex(), value and value.hex()]).encode())
        for key in sorted(table):
            h.update(key + b"=" + table[key])
        print("digest", h.hexdigest(), len(outputs.sent), "records sent")


if __name__ == "__main__":
    main()
