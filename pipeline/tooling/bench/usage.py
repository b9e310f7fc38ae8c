"""Usage while jobs run, at a centre's size: ``nodes`` simulated compute nodes, each
running ``jobs_per_node`` jobs and sampling them every ``interval_s``, through the worker
and the sink (the ``node-usage`` phase), and the node edge's own cost on this node (the
``node-edge`` phase).

The flow phase publishes ``intervals`` rounds of one ``node-usage`` record per job, paced
at the rate the nodes would send them (10,000 nodes x 4 jobs every 30 s: 1,333 samples/s),
each round's samples spread over the interval as unsynchronised edges spread them, and
measures, on the jobs of one key in ``sample_every``, the time from a sample's publish to
its job document searchable at the revision the sample gives it (the latency phase's
probe, :func:`pipeline.tooling.bench.flow.run_latency`). The jobs have no lifecycle
records: the cost measured is the samples' own. The worker's CPU per sample is its share
of a core over the publish, divided by the rate; the flow keeps up when the rate achieved
is the rate asked and every probed sample is searchable before its job's next one comes;
otherwise what it sustained is the samples over the time to the last one's document.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from elasticsearch import Elasticsearch
from rich.console import Console

from pipeline.runtime.config import Config
from pipeline.tooling.bench.feed import Feed, feed_of
from pipeline.tooling.bench.flow import run_latency
from pipeline.tooling.workload import GeneratedRecord, WorkloadSpec

__all__ = ["UsageFlowResult", "run_usage_flow", "usage_feed"]

#: the node edge's default interval (Slurm's JobAcctGatherFrequency default)
INTERVAL_S = 30.0


@dataclass
class UsageFlowResult:
    nodes: int
    jobs_per_node: int
    interval_s: float
    samples: int
    rate_target: float
    rate_achieved: float
    sampled_jobs: int
    unobserved: int
    p50_s: float | None
    p99_s: float | None
    max_s: float | None
    worker_cpu_ms_per_sample: float | None
    cpu_share: dict[str, float]
    rss_peak_mib: dict[str, float | None]
    writes: dict[str, int]

    @property
    def kept_up(self) -> bool:
        """Every probed sample searchable before its job's next sample came."""
        return (self.unobserved == 0 and self.rate_achieved >= 0.95 * self.rate_target
                and self.p99_s is not None and self.p99_s < self.interval_s)

    @property
    def sustained_per_s(self) -> float | None:
        """What the flow got through: the samples over the time from the first publish
        to the last sample's document (a flow that keeps up: about the rate)."""
        if not self.rate_achieved or self.max_s is None:
            return None
        return self.samples / (self.samples / self.rate_achieved + self.max_s)


def _payload(job_id: int, node: int, t: float, i: int, rng: random.Random) -> bytes:
    busy = rng.uniform(0.0, 4.0)
    return json.dumps({
        "v": 1, "scheduler": "slurm", "job_id": str(job_id), "node": f"n{node:05d}",
        "reader": "cgroup-v2", "sampled_at": t, "epoch": f"cg{job_id}", "run": "bench",
        "cpu_s": busy * INTERVAL_S * (i + 1), "cpu_user_s": busy * INTERVAL_S * (i + 1),
        "cpu_system_s": 0.0, "interval_s": INTERVAL_S if i else None,
        "cpu_interval_s": busy * INTERVAL_S if i else None,
        "mem_bytes": rng.randrange(2**28, 2**34), "mem_peak_bytes": 2**34,
        "mem_rss_bytes": None, "mem_file_bytes": None, "mem_limit_bytes": 2**35,
        "processes": 4, "gpus": [], "gpu_busy_s": None, "gpu_s": None,
        "gpu_idle_since": None, "final": False, "reason": None,
    }, separators=(",", ":")).encode()


def usage_feed(nodes: int, jobs_per_node: int, intervals: int, *, seed: int,
               start: float, cluster: str = "bench") -> Feed:
    """``intervals`` rounds of one sample per job, in publishing order, folded offline."""
    rng = random.Random(seed)
    offsets = [rng.uniform(0.0, INTERVAL_S) for _ in range(nodes)]
    records = []
    for i in range(intervals):
        round_ = []
        for node in range(nodes):
            t = start + i * INTERVAL_S + offsets[node]
            for j in range(jobs_per_node):
                job_id = 1_000_000 + node * jobs_per_node + j
                round_.append(GeneratedRecord(
                    time=t, cluster=cluster, scheduler="slurm", format="node-usage",
                    key=f"{cluster}:{job_id}", payload=_payload(job_id, node, t, i, rng)))
        records += sorted(round_, key=lambda r: r.time)
    return feed_of(WorkloadSpec(seed=seed, jobs=nodes * jobs_per_node), records, {})


def run_usage_flow(cfg: Config, es: Elasticsearch, feed: Feed, logs: Path, *, nodes: int,
                   jobs_per_node: int, sample_every: int, timeout: float,
                   console: Console) -> UsageFlowResult:
    rate = nodes * jobs_per_node / INTERVAL_S
    lat = run_latency(cfg, es, feed, logs, rate=rate, sample_every=sample_every,
                      timeout=timeout, console=console)
    worker = sum(v for k, v in lat.cpu_share.items() if k.startswith("worker"))
    return UsageFlowResult(
        nodes=nodes, jobs_per_node=jobs_per_node, interval_s=INTERVAL_S,
        samples=feed.total_events, rate_target=rate, rate_achieved=lat.rate_achieved,
        sampled_jobs=lat.sampled_jobs, unobserved=lat.unobserved, p50_s=lat.p50_s,
        p99_s=lat.p99_s, max_s=lat.max_s,
        worker_cpu_ms_per_sample=1000 * worker / lat.rate_achieved if lat.rate_achieved
        else None, cpu_share=lat.cpu_share, rss_peak_mib=lat.rss_peak_mib,
        writes=lat.writes)


def as_details(res: UsageFlowResult) -> dict[str, Any]:
    return {**asdict(res), "kept_up": res.kept_up, "sustained_per_s": res.sustained_per_s}
