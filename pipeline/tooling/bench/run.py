"""One benchmark run: the phases in order, on names of their own, cleaned up at the end.

Order: the in-process ceilings first (the raw topic of the e2e phase is filled once and
read by the consume ceiling and the baseline before the flow reads it), then the e2e flow,
the replay of its raw topic, the paced latency run, and the tracked-jobs memory run; so
each figure is taken with nothing else of the benchmark running.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from pipeline import PACKAGE_DIR
from pipeline.kafka.topics import ensure_topics
from pipeline.replay.readback import client
from pipeline.runtime.config import Config
from pipeline.sink.names import Family
from pipeline.tooling.bench import ceilings, flow, memos, stage, tracked
from pipeline.tooling.bench.feed import (
    EVENTS_PER_JOB,
    Feed,
    build_feed,
    expected_documents,
    publish_all,
    workload_spec,
)
from pipeline.tooling.bench.phase_names import BenchNames, cleanup
from pipeline.tooling.bench.report import Figure, at_least, below, figure
from pipeline.tooling.bench.rss import BENCH

__all__ = ["OPTIONAL_PHASES", "PHASES", "BenchOptions", "BenchResult", "run_bench"]

PHASES = ("ceilings", "baseline", "e2e", "replay", "latency", "memory")
#: phases run only when named: ``slurm-edge`` is the Slurm edge alone polling a squeue
#: document of ``tracked_jobs`` pending jobs (its memory, without the worker's run);
#: ``memos`` one job with ``memos`` memo events against as many ordinary events
#: ``node-usage`` the samples of ``usage_nodes`` nodes running ``usage_jobs_per_node`` jobs
#: each through the flow; ``node-edge`` the node edge's CPU and memory on this node;
#: ``burst`` a ``burst_tasks``-task job array published at once beside the live feed at
#: ``rate`` (:mod:`pipeline.tooling.bench.burst`)
OPTIONAL_PHASES = ("slurm-edge", "memos", "node-usage", "node-edge", "burst")

#: docs/design.md, "Targets"
TARGET_RATIO = 0.5
TARGET_P99_S = 1.5
#: what one worker may spend per event so that the flow keeps up on a small machine
#: (issue 11: Kafka, Elasticsearch and the sink take the rest of two cores)
TARGET_WORKER_CPU_MS = 0.2
#: issue 33: a node sample searchable within 5 s at 10,000 nodes x 4 jobs; the node edge
#: at most 20 ms of CPU per interval and 40 MiB with 64 jobs and 2,000 processes
TARGET_USAGE_P99_S = 5.0
TARGET_EDGE_CPU_MS = 20.0
TARGET_EDGE_RSS_MIB = 40.0
#: issue 35: a 10,000-task array's documents all searchable within 15 s (goal 5 s), the
#: live feed's p99 under 3 s meanwhile
TARGET_BURST_S = 15.0
TARGET_BURST_LIVE_P99_S = 3.0


@dataclass(frozen=True)
class BenchOptions:
    seed: int = 1
    #: jobs of the e2e workload
    jobs: int = 3000
    time_scale: float = 0.05
    #: canonical events/s of the latency run
    rate: float = 1000.0
    #: seconds of publishing in the latency run
    latency_s: float = 20.0
    #: one job in this many is sampled for latency
    sample_every: int = 50
    workers: int = 1
    #: longest run of the one-request-per-event baseline
    baseline_s: float = 15.0
    #: jobs tracked in the memory run (0: no memory run)
    tracked_jobs: int = 0
    #: the memory run's feed of new jobs after it caught up, seconds (0: none), at ``rate``
    memory_feed_s: float = 0.0
    #: memo events of the one job of the memos phase
    memos: int = 10_000
    #: the node-usage phase: simulated nodes, jobs on each, rounds of samples
    usage_nodes: int = 10_000
    usage_jobs_per_node: int = 4
    usage_intervals: int = 3
    #: the node-edge phase: jobs and processes on this node
    edge_jobs: int = 64
    edge_processes: int = 2_000
    #: the burst phase: tasks of the array, and whose (``flux``, ``slurm`` or ``both``:
    #: half each, :func:`pipeline.tooling.workload_burst.split_tasks`)
    burst_tasks: int = 10_000
    burst_scheduler: str = "both"
    phases: tuple[str, ...] = PHASES
    #: longest wait for any one phase to finish
    timeout: float = 600.0
    #: where the children's logs go (None: a temporary directory, deleted)
    logs: Path | None = None
    keep: bool = False


@dataclass
class BenchResult:
    figures: list[Figure]
    details: dict[str, Any] = field(default_factory=dict)


def machine(cfg: Config) -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import psutil

    return {"cpus": os.cpu_count(), "cpu_model": model, "memory_gib":
            round(psutil.virtual_memory().total / 2**30, 1), "python": platform.python_version(),
            "platform": platform.platform(), "load_at_start": list(os.getloadavg()),
            "code": code_revision()}


def code_revision() -> str | None:
    """``git describe --always --dirty`` of the jobstream this process imported (its
    children run the same: they inherit the working directory, which Python puts first on
    the path). None outside a git checkout."""
    root = PACKAGE_DIR.parent
    try:
        out = subprocess.run(["git", "-C", str(root), "describe", "--always", "--dirty"],
                             capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def run_bench(cfg: Config, opts: BenchOptions, console: Console) -> BenchResult:
    """All the requested phases; figures not measured are None."""
    from pipeline.tooling.stack import ensure_up

    info = ensure_up(cfg, console=console)
    cfg = info.client_config(cfg)
    details: dict[str, Any] = {"machine": machine(cfg), "options": {
        k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(opts).items()},
        "stack": {"kafka": info.kafka_version, "elasticsearch": info.elasticsearch_version}}
    values: dict[str, Any] = {}
    with ExitStack() as stack:
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="jobstream-bench-")))
        names = BenchNames.new(root)
        logs = opts.logs or root / "logs"
        if not opts.keep:
            stack.callback(lambda: cleanup(cfg, names))
        es = client(cfg, timeout=120.0)
        details["run"] = names.token
        console.print(f"bench run [bold]{names.token}[/]; logs in {logs}")

        e2e_cfg = names.phase(cfg, "e2e")
        feed: Feed | None = None
        if {"ceilings", "baseline", "e2e", "replay"} & set(opts.phases):
            with console.status(f"building the workload: {opts.jobs} jobs"):
                feed = build_feed(workload_spec(opts.seed, opts.jobs, opts.rate,
                                                opts.time_scale))
            details["workload"] = {"jobs": feed.jobs, "records": len(feed.records),
                                   "events": feed.total_events}
            ensure_topics(e2e_cfg)
            with console.status(f"publishing {len(feed.records)} raw records"):
                details["workload"]["prefill_s"] = publish_all(e2e_cfg, feed.records)

        if "ceilings" in opts.phases and feed is not None:
            _ceilings(cfg, names, es, feed, e2e_cfg, values, details, console)
        if "baseline" in opts.phases and feed is not None:
            bcfg = names.phase(cfg, "naive").replace(topics={"raw": e2e_cfg.topics.raw})
            with console.status(f"baseline: one index request per event ({opts.baseline_s:g} s)"):
                rate = ceilings.naive_baseline(bcfg, es, len(feed.records), opts.baseline_s)
            values["baseline_events_per_s"] = rate.per_s
            details["baseline"] = asdict(rate)
        if "e2e" in opts.phases and feed is not None:
            _e2e(e2e_cfg, es, feed, opts, logs / "e2e", values, details, console)
        if "replay" in opts.phases and feed is not None:
            _replay(e2e_cfg, feed, logs / "replay", values, details, console)
        if "latency" in opts.phases:
            lat_cfg = names.phase(cfg, "latency")
            jobs = max(int(opts.rate * opts.latency_s / EVENTS_PER_JOB), 1)
            with console.status(f"building the latency workload: {jobs} jobs"):
                lfeed = build_feed(workload_spec(opts.seed + 1, jobs, opts.rate,
                                                 opts.time_scale))
            lat = flow.run_latency(lat_cfg, es, lfeed, logs / "latency", rate=opts.rate,
                                   sample_every=opts.sample_every, timeout=opts.timeout,
                                   console=console)
            values.update(latency_p50_s=lat.p50_s, latency_p99_s=lat.p99_s)
            details["latency"] = asdict(lat)
            details["latency"]["writes_per_job"] = {
                k: v / lat.jobs for k, v in lat.writes.items()}
            details["latency"]["events_per_job"] = lat.events / lat.jobs
        if "memory" in opts.phases and opts.tracked_jobs > 0:
            mem = tracked.run_tracked(names.phase(cfg, "tracked"), opts.tracked_jobs,
                                      opts.seed, logs / "tracked", timeout=opts.timeout,
                                      console=console, feed_s=opts.memory_feed_s,
                                      feed_rate=opts.rate, time_scale=opts.time_scale)
            details["tracked"] = asdict(mem)
        if "slurm-edge" in opts.phases and opts.tracked_jobs > 0:
            edge = tracked.run_slurm_edge(names.phase(cfg, "slurmedge"), opts.tracked_jobs,
                                          opts.seed, logs / "slurm-edge", timeout=opts.timeout,
                                          console=console)
            details["slurm_edge"] = asdict(edge)
        if "memos" in opts.phases:
            res = memos.run_memos(names.phase(cfg, "memos"), es, opts.memos, opts.seed + 2,
                                  logs / "memos", timeout=opts.timeout, console=console)
            details["memos"] = {**asdict(res), "check": res.check.as_dict(),
                                "ratio": res.ratio}
        if "node-usage" in opts.phases:
            _node_usage(names.phase(cfg, "usage"), es, opts, logs / "node-usage", values,
                        details, console)
        if "burst" in opts.phases:
            _burst(names.phase(cfg, "burst"), es, opts, logs / "burst", values, details,
                   console)
        if "node-edge" in opts.phases:
            with console.status(f"node edge: {opts.edge_jobs} jobs, {opts.edge_processes} "
                                "processes"):
                edge_cost = _node_edge_cost(opts.edge_jobs, opts.edge_processes)
            # the steady intervals' median (the first reads every environment), and the
            # sampling process's peak resident set (the sampler in a process of its own, not
            # the daemon with its Kafka client and spool: docs/node.md "Cost")
            values.update(node_edge_cpu_ms_per_interval=1000 * edge_cost["cpu_median_s"],
                          node_edge_rss_mib=edge_cost["rss_hwm_mib"])
            details["node_edge"] = edge_cost
        details["machine"]["load_at_end"] = list(os.getloadavg())
    return BenchResult(_figures(values, opts), details)


def _ceilings(cfg: Config, names: BenchNames, es: Any, feed: Feed, e2e_cfg: Config,
              values: dict[str, Any], details: dict[str, Any], console: Console) -> None:
    with console.status(f"ceiling: consume + decode + parse, best of "
                        f"{ceilings.CEILING_PASSES}"):
        passes = [ceilings.consume_ceiling(e2e_cfg, len(feed.records))
                  for _ in range(ceilings.CEILING_PASSES)]
    consume = max(passes, key=lambda rate: rate.per_s)
    jobs_cfg = names.phase(cfg, "bulkjobs")
    docs = list(expected_documents(cfg, feed).values())
    with console.status(f"ceiling: bulk-index {len(docs)} job documents"):
        bulk_jobs = ceilings.bulk_ceiling(jobs_cfg, es, Family.JOBS, docs)
    events_cfg = names.phase(cfg, "bulkevents")
    events = ceilings.worker_event_documents(cfg, feed)
    with console.status(f"ceiling: bulk-index {len(events)} event documents"):
        bulk_events = ceilings.bulk_ceiling(events_cfg, es, Family.EVENTS, events)
    with console.status(f"ceiling: the jobs stage alone on {len(feed.records)} raw records"):
        alone = stage.stage_cost(e2e_cfg, feed)
    if alone.wrong:
        console.print(f"[red]the jobs stage alone left {alone.wrong} job documents short of "
                      "the offline fold[/]")
    values.update(consume_decode_ceiling_events_per_s=consume.per_s,
                  bulk_job_docs_per_s=bulk_jobs.per_s, bulk_event_docs_per_s=bulk_events.per_s,
                  stage_cpu_ms_per_event=alone.cpu_ms_per_event)
    details["ceilings"] = {"consume_decode": asdict(consume),
                           "consume_decode_passes_per_s": [rate.per_s for rate in passes],
                           "bulk_jobs": asdict(bulk_jobs),
                           "bulk_events": asdict(bulk_events),
                           "stage": {**asdict(alone), "cpu_ms_per_event": alone.cpu_ms_per_event}}


def _e2e(cfg: Config, es: Any, feed: Feed, opts: BenchOptions, logs: Path,
         values: dict[str, Any], details: dict[str, Any], console: Console) -> None:
    res = flow.run_e2e(cfg, es, feed, logs, workers=opts.workers, timeout=opts.timeout,
                       console=console)
    jobs = res.jobs
    writes = res.writes
    workers_peak = [v for k, v in res.rss_peak_mib.items() if k.startswith("worker") and v]
    workers_end = [v for k, v in res.rss_end_mib.items() if k.startswith("worker") and v]
    values.update(
        e2e_events_per_s=res.events_per_s,
        events_per_job=res.events / jobs,
        job_doc_writes_per_job=writes.get(Family.JOBS.value, 0) / jobs,
        all_writes_per_job=sum(writes.values()) / jobs,
        worker_rss_peak_mib=max(workers_peak, default=None),
        worker_rss_end_mib=max(workers_end, default=None),
        sink_rss_peak_mib=res.rss_peak_mib.get("sink"),
        e2e_documents_ok=res.check.ok,
    )
    d = asdict(res)
    d["check"] = res.check.as_dict()
    d["events_per_s"] = res.events_per_s
    d["events_per_s_per_worker"] = res.events_per_s / res.workers
    # what one worker does with a core of its own (here it shares two with everything)
    worker_cpu = sum(v for k, v in res.cpu_s.items() if k.startswith("worker"))
    d["events_per_worker_cpu_s"] = res.events / worker_cpu if worker_cpu else None
    values["worker_cpu_ms_per_event"] = 1000 * worker_cpu / res.events if worker_cpu else None
    d["events_per_sink_cpu_s"] = (res.events / res.cpu_s["sink"]
                                  if res.cpu_s.get("sink") else None)
    # how many cores the flow, Kafka, Elasticsearch and the bench kept busy together
    d["cores_busy"] = sum(res.cpu_s.values()) / res.seconds if res.seconds else None
    # what the machine's cores could do at the flow's CPU per event (the worker, the sink,
    # Kafka, Elasticsearch; not the bench, which only watches): the rate of a flow that
    # kept every core busy, which no overlap of its waits can pass
    flow_cpu = sum(v for k, v in res.cpu_s.items() if k != BENCH)
    cpus = details["machine"]["cpus"]
    d["flow_cpu_ms_per_event"] = 1000 * flow_cpu / res.events if flow_cpu else None
    d["cpu_limit_events_per_s"] = cpus * res.events / flow_cpu if flow_cpu and cpus else None
    values.update(e2e_cores_busy=d["cores_busy"],
                  e2e_flow_cpu_ms_per_event=d["flow_cpu_ms_per_event"],
                  e2e_cpu_limit_events_per_s=d["cpu_limit_events_per_s"])
    details["e2e"] = d
    if not res.check.ok:
        console.print(f"[red]e2e documents differ from the offline fold:[/] "
                      f"{res.check.as_dict()}")


def _node_edge_cost(jobs: int, processes: int) -> dict[str, Any]:
    """:func:`pipeline.edges.node.bench.measure` in a process of its own: its resident set
    is then the sampler's, not the bench's."""
    code = ("import json, sys\nfrom pipeline.edges.node.bench import measure\n"
            f"print(json.dumps(measure({jobs}, {processes}, 10)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _node_usage(cfg: Config, es: Any, opts: BenchOptions, logs: Path, values: dict[str, Any],
                details: dict[str, Any], console: Console) -> None:
    from pipeline.tooling.bench.usage import as_details, run_usage_flow, usage_feed

    samples = opts.usage_nodes * opts.usage_jobs_per_node * opts.usage_intervals
    with console.status(f"node usage: building {samples} samples"):
        feed = usage_feed(opts.usage_nodes, opts.usage_jobs_per_node, opts.usage_intervals,
                          seed=opts.seed + 3, start=time.time())
    res = run_usage_flow(cfg, es, feed, logs, nodes=opts.usage_nodes,
                         jobs_per_node=opts.usage_jobs_per_node,
                         sample_every=opts.sample_every, timeout=opts.timeout,
                         console=console)
    values.update(usage_p99_s=res.p99_s, usage_kept_up=res.kept_up,
                  usage_sustained_per_s=res.sustained_per_s,
                  worker_cpu_ms_per_sample=res.worker_cpu_ms_per_sample)
    details["node_usage"] = as_details(res)


def _burst(cfg: Config, es: Any, opts: BenchOptions, logs: Path, values: dict[str, Any],
           details: dict[str, Any], console: Console) -> None:
    from pipeline.tooling.bench.burst import LIVE_S, as_details, burst_feed, run_burst

    jobs = max(int(opts.rate * LIVE_S / EVENTS_PER_JOB), 1)
    with console.status(f"burst: building the live workload ({jobs} jobs) and "
                        f"{opts.burst_tasks} tasks ({opts.burst_scheduler})"):
        live = build_feed(workload_spec(opts.seed + 4, jobs, opts.rate, opts.time_scale))
        burst = burst_feed(opts.burst_tasks, opts.burst_scheduler, time.time())
    res = run_burst(cfg, es, live, burst, logs, scheduler=opts.burst_scheduler,
                    rate=opts.rate, sample_every=opts.sample_every, timeout=opts.timeout,
                    console=console)
    values.update(burst_all_searchable_s=res.all_searchable_s,
                  burst_live_p99_s=res.live_p99_s, burst_documents_ok=res.check.ok)
    details["burst"] = as_details(res)
    if not res.check.ok:
        console.print(f"[red]burst task documents differ from the offline fold:[/] "
                      f"{res.check.as_dict()}")


def _replay(cfg: Config, feed: Feed, logs: Path, values: dict[str, Any],
            details: dict[str, Any], console: Console) -> None:
    try:
        from pipeline.replay.reprocess import run_replay
    except ImportError:  # an installation without the replay command
        details["replay"] = {"skipped": "jobstream replay is not available"}
        return
    quiet = Console(file=open(os.devnull, "w"))  # noqa: SIM115 -- closed below
    started = time.monotonic()
    try:
        with console.status(f"replay: {len(feed.records)} raw records into generation v2"):
            run_replay(cfg, "v2", since_ms=None, swap=False, console=quiet, logs=logs)
    finally:
        quiet.file.close()
    seconds = time.monotonic() - started
    values["replay_records_per_s"] = len(feed.records) / seconds
    details["replay"] = {"records": len(feed.records), "events": feed.total_events,
                         "seconds": seconds, "records_per_s": len(feed.records) / seconds,
                         "events_per_s": feed.total_events / seconds}


def _figures(v: dict[str, Any], opts: BenchOptions) -> list[Figure]:
    ceiling = v.get("consume_decode_ceiling_events_per_s")
    e2e = v.get("e2e_events_per_s")
    ratio = e2e / ceiling if e2e and ceiling else None
    limit = v.get("e2e_cpu_limit_events_per_s")
    baseline = v.get("baseline_events_per_s")
    epj = v.get("events_per_job")
    jw = v.get("job_doc_writes_per_job")
    return [
        figure("consume_decode_ceiling_events_per_s", ceiling, "events/s",
               note="one process: consume + Avro decode + parse"),
        figure("bulk_job_docs_per_s", v.get("bulk_job_docs_per_s"), "docs/s",
               note="sink bulk client, sink templates"),
        figure("bulk_event_docs_per_s", v.get("bulk_event_docs_per_s"), "docs/s"),
        figure("e2e_events_per_s", e2e, "events/s",
               note=f"{opts.workers} worker(s) + 1 sink; raw -> searchable job documents"
                    + ("" if v.get("e2e_documents_ok", True) else "; DOCUMENTS DIFFER")),
        figure("e2e_ratio_to_ceiling", ratio, "", f"≥ {TARGET_RATIO}", at_least(TARGET_RATIO)),
        figure("e2e_cores_busy", v.get("e2e_cores_busy"), "cores",
               note="CPU-s of every process sampled (bench too) / s"),
        figure("e2e_flow_cpu_ms_per_event", v.get("e2e_flow_cpu_ms_per_event"), "ms",
               note="worker + sink + Kafka + Elasticsearch"),
        figure("e2e_cpu_limit_events_per_s", limit, "events/s",
               note="the machine's cores / the flow's CPU per event"),
        figure("e2e_cpu_limit_ratio_to_ceiling", limit / ceiling if limit and ceiling else None,
               "", note="the highest e2e / ceiling on these cores"),
        figure("worker_cpu_ms_per_event", v.get("worker_cpu_ms_per_event"), "ms",
               f"≤ {TARGET_WORKER_CPU_MS}", lambda ms: ms <= TARGET_WORKER_CPU_MS,
               note="e2e run, every worker's CPU time"),
        figure("stage_cpu_ms_per_event", v.get("stage_cpu_ms_per_event"), "ms",
               note="the jobs stage alone: no Kafka, no Faust"),
        figure("latency_p50_s", v.get("latency_p50_s"), "s",
               note=f"at {opts.rate:g} events/s, 1 job in {opts.sample_every} sampled"),
        figure("latency_p99_s", v.get("latency_p99_s"), "s", f"< {TARGET_P99_S}",
               below(TARGET_P99_S)),
        figure("events_per_job", epj, ""),
        figure("job_doc_writes_per_job", jw, "", "≪ events/job",
               (lambda w: w <= epj / 4) if epj else None, note="e2e run, _stats index_total"),
        figure("all_writes_per_job", v.get("all_writes_per_job"), "",
               note="job documents + events + snapshots"),
        figure("worker_rss_peak_mib", v.get("worker_rss_peak_mib"), "MiB"),
        figure("worker_rss_end_mib", v.get("worker_rss_end_mib"), "MiB"),
        figure("sink_rss_peak_mib", v.get("sink_rss_peak_mib"), "MiB"),
        figure("replay_records_per_s", v.get("replay_records_per_s"), "records/s",
               note="jobstream replay, process start included"),
        figure("baseline_events_per_s", baseline, "events/s",
               note="one consumer, one index request per event"),
        figure("e2e_vs_baseline", e2e / baseline if e2e and baseline else None, "x"),
        figure("usage_p99_s", v.get("usage_p99_s"), "s", f"< {TARGET_USAGE_P99_S}",
               below(TARGET_USAGE_P99_S),
               note=f"node sample -> searchable job document, {opts.usage_nodes} nodes x "
                    f"{opts.usage_jobs_per_node} jobs / 30 s"
                    + ("" if v.get("usage_kept_up", True) else "; DID NOT KEEP UP")),
        figure("usage_sustained_samples_per_s", v.get("usage_sustained_per_s"), "/s",
               note="samples / (publish time + the last one's latency)"),
        figure("worker_cpu_ms_per_sample", v.get("worker_cpu_ms_per_sample"), "ms",
               note="node-usage run; compare worker_cpu_ms_per_event"),
        figure("node_edge_cpu_ms_per_interval", v.get("node_edge_cpu_ms_per_interval"), "ms",
               f"≤ {TARGET_EDGE_CPU_MS:g}", lambda ms: ms <= TARGET_EDGE_CPU_MS,
               note=f"{opts.edge_jobs} jobs, {opts.edge_processes} processes"),
        figure("node_edge_rss_mib", v.get("node_edge_rss_mib"), "MiB",
               f"≤ {TARGET_EDGE_RSS_MIB:g}", lambda mib: mib <= TARGET_EDGE_RSS_MIB,
               note="the sampler's process at its peak, without the daemon's Kafka client"),
        figure("burst_all_searchable_s", v.get("burst_all_searchable_s"), "s",
               f"< {TARGET_BURST_S:g}",
               # a fast run with documents other than the offline fold's does not count
               lambda s: s < TARGET_BURST_S and bool(v.get("burst_documents_ok", True)),
               note=f"{opts.burst_tasks} tasks ({opts.burst_scheduler}) at once: first record "
                    "-> every task's document final"
                    + ("" if v.get("burst_documents_ok", True) else "; DOCUMENTS DIFFER")),
        figure("burst_live_p99_s", v.get("burst_live_p99_s"), "s",
               f"< {TARGET_BURST_LIVE_P99_S:g}", below(TARGET_BURST_LIVE_P99_S),
               note=f"the live feed at {opts.rate:g} events/s, published in that window"),
    ]
