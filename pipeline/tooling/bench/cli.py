"""``jobstream bench``: the figures of docs/design.md ("Targets") in one run on the local stack."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from pipeline.runtime.invocation import get_config
from pipeline.tooling.bench.report import figures_table, write_json
from pipeline.tooling.bench.run import OPTIONAL_PHASES, PHASES, BenchOptions, run_bench

__all__ = ["bench"]


def _phases(_: click.Context, __: click.Parameter, value: str) -> tuple[str, ...]:
    chosen = tuple(p.strip() for p in value.split(",") if p.strip())
    unknown = [p for p in chosen if p not in PHASES + OPTIONAL_PHASES]
    if unknown or not chosen:
        raise click.BadParameter(f"choose from {', '.join(PHASES + OPTIONAL_PHASES)}")
    return chosen


@click.command("bench")
@click.option("--jobs", type=click.IntRange(1), default=BenchOptions.jobs, show_default=True,
              help="Jobs of the e2e workload (~14.2 canonical events each).")
@click.option("--rate", type=click.FloatRange(min=1), default=BenchOptions.rate,
              show_default=True, help="Canonical events/s published in the latency run.")
@click.option("--latency-seconds", "latency_s", type=click.FloatRange(min=1),
              default=BenchOptions.latency_s, show_default=True,
              help="How long the latency run publishes.")
@click.option("--sample-every", type=click.IntRange(1), default=BenchOptions.sample_every,
              show_default=True, help="Latency: sample one job in this many.")
@click.option("--workers", type=click.IntRange(1, 64), default=BenchOptions.workers,
              show_default=True, help="Workers in the e2e run (one consumer group).")
@click.option("--baseline-seconds", "baseline_s", type=click.FloatRange(min=1),
              default=BenchOptions.baseline_s, show_default=True,
              help="Longest run of the one-request-per-event baseline.")
@click.option("--tracked-jobs", type=click.IntRange(0), default=0, show_default=True,
              help="Also measure worker and edge memory at this many tracked jobs.")
@click.option("--memory-feed-s", type=click.FloatRange(min=0),
              default=BenchOptions.memory_feed_s, show_default=True,
              help="Memory phase: then feed new jobs at --rate for this long and measure "
              "the worker again (flat over time).")
@click.option("--memos", type=click.IntRange(1), default=BenchOptions.memos, show_default=True,
              help="Memo events of the one job of the memos phase.")
@click.option("--usage-nodes", type=click.IntRange(1), default=BenchOptions.usage_nodes,
              show_default=True, help="node-usage phase: simulated nodes.")
@click.option("--usage-jobs-per-node", type=click.IntRange(1),
              default=BenchOptions.usage_jobs_per_node, show_default=True,
              help="node-usage phase: jobs running on each node.")
@click.option("--usage-intervals", type=click.IntRange(1),
              default=BenchOptions.usage_intervals, show_default=True,
              help="node-usage phase: rounds of samples (30 s of publishing each).")
@click.option("--edge-jobs", type=click.IntRange(1), default=BenchOptions.edge_jobs,
              show_default=True, help="node-edge phase: jobs on this node.")
@click.option("--edge-processes", type=click.IntRange(1), default=BenchOptions.edge_processes,
              show_default=True, help="node-edge phase: their processes.")
@click.option("--burst-tasks", type=click.IntRange(1), default=BenchOptions.burst_tasks,
              show_default=True, help="burst phase: tasks of the job array.")
@click.option("--burst-scheduler", type=click.Choice(["flux", "slurm", "both"]),
              default=BenchOptions.burst_scheduler, show_default=True,
              help="burst phase: whose array (both: half the tasks each).")
@click.option("--seed", type=int, default=BenchOptions.seed, show_default=True)
@click.option("--time-scale", type=click.FloatRange(min=0.001),
              default=BenchOptions.time_scale, show_default=True,
              help="Scales the workload's waits and run times (how many jobs overlap).")
@click.option("--phases", default=",".join(PHASES), show_default=True, callback=_phases,
              help="Which phases to run, comma separated (also: "
              f"{', '.join(OPTIONAL_PHASES)}: slurm-edge with --tracked-jobs).")
@click.option("--timeout", type=click.FloatRange(min=10), default=BenchOptions.timeout,
              show_default=True, help="Longest wait for any one phase.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Write the figures and details as JSON to this file.")
@click.option("--logs", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Keep the worker, sink and edge logs here [default: deleted].")
@click.option("--keep", is_flag=True, help="Leave the run's topics and indices in place.")
@click.pass_context
def bench(ctx: click.Context, jobs: int, rate: float, latency_s: float, sample_every: int,
          workers: int, baseline_s: float, tracked_jobs: int, memory_feed_s: float, memos: int,
          usage_nodes: int, usage_jobs_per_node: int, usage_intervals: int, edge_jobs: int,
          edge_processes: int, burst_tasks: int, burst_scheduler: str, seed: int,
          time_scale: float, phases: tuple[str, ...], timeout: float, json_path: Path | None,
          logs: Path | None, keep: bool) -> None:
    """Measure the flow against its ceilings on the local stack (started if needed).

    Prints end-to-end throughput as a fraction of the consume-and-decode ceiling, latency
    p50/p99 at a set rate, Elasticsearch writes per job, worker memory, the replay rate and
    a one-request-per-event baseline. Every phase uses topics, indices and consumer groups
    of its own, deleted at the end. The defaults take a few minutes.
    """
    opts = BenchOptions(seed=seed, jobs=jobs, time_scale=time_scale, rate=rate,
                        latency_s=latency_s, sample_every=sample_every, workers=workers,
                        baseline_s=baseline_s, tracked_jobs=tracked_jobs,
                        memory_feed_s=memory_feed_s, memos=memos,
                        usage_nodes=usage_nodes, usage_jobs_per_node=usage_jobs_per_node,
                        usage_intervals=usage_intervals, edge_jobs=edge_jobs,
                        edge_processes=edge_processes, burst_tasks=burst_tasks,
                        burst_scheduler=burst_scheduler,
                        phases=phases, timeout=timeout, logs=logs, keep=keep)
    console = Console()
    result = run_bench(get_config(ctx), opts, console)
    load = result.details["machine"]
    # wide enough for the figures' names and notes even when the output is a file (rich's
    # default: 80; print(width=) only narrows)
    console.width = max(console.width, 120)
    console.print(figures_table(result.figures, "jobstream bench"))
    console.print(f"[dim]{load['cpus']} CPUs ({load['cpu_model']}), load average "
                  f"{load['load_at_start'][0]:.2f} at start, {load['load_at_end'][0]:.2f} "
                  f"at end[/]")
    e2e = result.details.get("e2e")
    if e2e:
        cpu = ", ".join(f"{name} {s:.1f}" for name, s in sorted(
            e2e["cpu_s"].items(), key=lambda kv: -kv[1]))
        jit = ", ".join(f"{name} {s:.1f}" for name, s in e2e.get("jit_cpu_s", {}).items())
        console.print(f"e2e CPU-s over {e2e['seconds']:.1f} s: {cpu} "
                      f"({e2e['cores_busy']:.2f} cores busy)"
                      + (f"; of which JIT compiling: {jit}" if jit else ""))
        window = e2e["window"]
        share = window["cpu_error_share"]
        console.print(f"e2e window from the worker's first event, {e2e['startup_s']:.1f} s "
                      f"after the processes started (located within "
                      f"{1000 * window['error_s']:.1f} ms; CPU baselines within "
                      f"{sum(window['cpu_error_s'].values()):.2f} CPU-s"
                      + (f", {share:.1%} of the window's" if share is not None else "")
                      + f"); its first output came {window['first_output_after_s']:.2f} s "
                      "later")
    tracked = result.details.get("tracked")
    if tracked:
        console.print(f"at {tracked['jobs']} tracked jobs: worker {tracked['worker_rss_end_mib']} "
                      f"MiB (peak {tracked['worker_rss_peak_mib']}), store "
                      f"{tracked['store_mib']} MiB on disk; Flux edge peak "
                      f"{tracked['flux_edge_rss_peak_mib']} MiB, Slurm edge peak "
                      f"{tracked['slurm_edge_rss_peak_mib']} MiB")
        fed = tracked.get("feed")
        if fed:
            console.print(f"after {fed['seconds']:.0f} s of feed ({fed['jobs']} new jobs at "
                          f"{fed['rate']:.0f} events/s): worker {fed['rss_end_mib']} MiB "
                          f"(peak {fed['rss_peak_mib']}), {fed['growth_mib']:+} MiB since "
                          f"the feed began")
    edge = result.details.get("slurm_edge")
    if edge:
        console.print(f"Slurm edge alone, {edge['jobs']} pending jobs ({edge['squeue_mib']} MiB "
                      f"of squeue JSON), {edge['polls']} polls: peak {edge['rss_peak_mib']} "
                      f"MiB, end {edge['rss_end_mib']} MiB")
    memo = result.details.get("memos")
    if memo:
        console.print(f"one job's {memo['memos']} memos then {memo['memo_jobs'] - 1} jobs: "
                      f"{memo['memo_events']} events in {memo['memo_s']:.1f} s; "
                      f"{memo['ordinary_events']} ordinary events of {memo['ordinary_jobs']} "
                      f"jobs in {memo['ordinary_s']:.1f} s; per event {memo['ratio']:.2f}x "
                      "the ordinary")
    burst = result.details.get("burst")
    if burst:
        arrays = ", ".join(f"{cluster} {burst['tasks'][cluster]} tasks "
                           + (f"in {s:.2f} s" if s is not None else "not all searchable")
                           for cluster, s in burst["array_searchable_s"].items())
        console.print(f"burst: {burst['records']} records ({burst['events']} events) "
                      f"published in {burst['publish_s']:.2f} s; {arrays}; live feed "
                      f"{burst['rate_achieved']:.0f} events/s, {burst['live_samples']} "
                      "samples in the window"
                      + (f" (p99 {burst['lead_p99_s']:.2f} s in the lead before it)"
                         if burst["lead_p99_s"] is not None else ""))
    if json_path is not None:
        write_json(json_path, result.figures, result.details)
        console.print(f"written to {json_path}")
    failed = any(result.details.get(phase, {}).get("check", {}).get("ok") is False
                 for phase in ("e2e", "memos", "burst"))
    ctx.exit(1 if failed else 0)
